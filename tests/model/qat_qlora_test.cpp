// tests/model/qat_qlora_test.cpp — QAT over a QLoRA base (model/qat_runtime.h add_nf4_weight):
// the frozen NF4 weights are fake-quantized from their dequantized values, so a QLoRA model
// trains exactly — losses and adapter gradients bit for bit — like a LoRA model whose dense base
// holds those dequantized values, with every QAT point on.
#include <gtest/gtest.h>

#include "ete/model/transformer.h"

namespace ete {
namespace {

TEST(QatQlora, TrainsLikeADenseBaseOfTheDequantizedWeights) {
    ModelConfig c;
    c.vocab_size = 67;
    c.hidden_size = 64;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.intermediate_size = 96;
    c.max_position_embeddings = 32;
    c.initializer_range = 0.2;
    LoraSpec lora;
    lora.enabled = true;
    lora.r = 4;
    lora.targets = {"all-linear"};
    QatSpec qat;
    qat.enabled = true;
    qat.points = qat_points_from_string("weight,linear_in,post_norm,residual");
    auto be = make_cpu_backend();
    lora.base_format = "nf4";
    Transformer q(c, *be, {}, DType::F32, lora);
    lora.base_format = "f32";
    Transformer d(c, *be, {}, DType::F32, lora);
    q.params().init(7);
    d.params().init(7);
    for (int i = 0; i < q.params().size(); ++i) {  // the dense base: dequant(NF4)
        if (!q.params().is_nf4(i)) continue;
        const std::vector<float> v = q.params().download(i);
        d.params().upload(d.params().index(q.params().specs()[size_t(i)].name), v.data());
    }
    // Adapters B start at zero: give them values, so the adapters take part in the products.
    for (Transformer* m : {&q, &d})
        for (int i = 0; i < m->params().size(); ++i) {
            const ParamSpec& s = m->params().specs()[size_t(i)];
            if (s.name.find("lora_B") == std::string::npos) continue;
            std::vector<float> v(size_t(shape_numel(s.shape)));
            for (size_t k = 0; k < v.size(); ++k) v[k] = 0.01f * float(int(k % 7) - 3);
            m->params().upload(i, v.data());
        }
    const int B = 2, T = 16;
    std::vector<int32_t> in(size_t(B * T)), tgt(in.size());
    for (int i = 0; i < B * T; ++i)
        in[size_t(i)] = (i * 37 + 11) % 67, tgt[size_t(i)] = (i * 53 + 5) % 67;
    double loss[2];
    std::vector<float> grads[2];
    Transformer* models[2] = {&q, &d};
    for (int k = 0; k < 2; ++k) {
        Transformer& m = *models[k];
        m.enable_qat(qat);
        m.setup(B, T);
        for (int step = 0; step < 2; ++step) {  // the first observes, the second quantizes
            m.qat()->begin_step(step);
            m.params().zero_grads();
            loss[k] = m.forward_backward(in.data(), tgt.data(), B, T, 1.0f / float(B * T));
            m.qat()->end_step(m.qat()->step_ranges());
        }
        m.qat()->finish_grads();
        grads[k] = m.params().download_grads();
    }
    EXPECT_EQ(loss[0], loss[1]);
    EXPECT_EQ(grads[0], grads[1]);
    EXPECT_FALSE(grads[0].empty());
    // The fake quantization is on: the dequantized base alone gives another loss.
    Transformer plain(c, *be, {}, DType::F32, lora);
    plain.params().from_host(d.params().to_host());
    for (int i = 0; i < d.params().size(); ++i)
        if (!d.params().trainable(i)) {
            const std::vector<float> v = d.params().download(i);
            plain.params().upload(i, v.data());
        }
    plain.setup(B, T);
    EXPECT_NE(plain.forward_loss(in.data(), tgt.data(), B, T) / double(B * T), loss[0]);
}

}  // namespace
}  // namespace ete
