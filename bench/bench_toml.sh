# bench/bench_toml.sh — sourced by the `ete train` benchmarks: the bench model (≈32M parameters:
# Llama, V=8192, C=512, F=1408, L=8, H=8/4, the model of ete_bench_train) as a job file.
# write_bench_toml FILE SEQ_LEN STEPS TOKENS_BIN
write_bench_toml() {
    cat >"$1" <<TOML
[model]
vocab_size = 8192
hidden_size = 512
intermediate_size = 1408
num_layers = 8
num_heads = 8
num_kv_heads = 4
max_position_embeddings = $2
tie_word_embeddings = false
[train]
steps = $3
seq_len = $2
grad_accum = 1
warmup_steps = 2
eval_every = 0
log_every = 1000
[data]
train = "$4"
tokenizer = ""
val_fraction = 0.0
TOML
}
