// ete/data/jinja_render.cpp — the renderer: statements, scopes and expressions (jinja.h).
//
// Scopes follow Jinja2: `if` opens none; each for-loop iteration opens one (what the body sets
// is gone at the next iteration and after the loop — hence namespace()); a macro call opens one
// over the template's top level. Operators follow Python (int/float, floor division and modulo
// signs, str and list concatenation and repetition); an undefined value may be printed, tested,
// compared with == and iterated (nothing), and anything else done to it is an error.
#include <fmt/format.h>

#include <cmath>
#include <ctime>

#include "ete/core/error.h"
#include "ete/data/jinja.h"
#include "ete/data/jinja_ast.h"
#include "ete/data/jinja_builtins.h"
#include "ete/data/jinja_pystr.h"

namespace ete::jinja {
namespace {

constexpr std::string_view kPrefix = "chat template line ";

struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    Frame* parent = nullptr;
    Value* find(std::string_view name) {
        for (Frame* f = this; f; f = f->parent)
            for (auto& [k, v] : f->vars)
                if (k == name) return &v;
        return nullptr;
    }
    void set(const std::string& name, Value v) {
        for (auto& [k, old] : vars) {
            if (k == name) {
                old = std::move(v);
                return;
            }
        }
        vars.emplace_back(name, std::move(v));
    }
};

enum class Flow { Normal, Break, Continue };

class Renderer {
  public:
    Renderer(const RenderOptions& opt, Rendered& out) : opt_(opt), result_(out), out_(&out.text) {
        env_.now = opt.now ? *opt.now : std::time(nullptr);
        env_.count_steps = [this](size_t n) { steps(n); };
        env_.max_items = opt.limits.max_items;
    }

    void run(const Program& prog, const nlohmann::ordered_json& context) {
        ETE_CHECK(context.is_object(), "the template's context must be a JSON object");
        Frame root;
        for (std::string_view g : {"range", "namespace", "dict", "raise_exception", "strftime_now"})
            root.set(std::string(g), Value::callable(std::string(g)));
        for (const auto& [k, v] : context.items()) root.set(k, Value::from_json(v));
        root_ = &root;
        try {
            exec(prog.body, root);
        } catch (const Error& e) {
            const std::string msg = e.what();
            if (msg.starts_with(kPrefix)) throw;
            throw Error(fmt::format("{}{}: {}", kPrefix, line_, msg));
        }
    }

  private:
    void steps(size_t n) {
        steps_ += int64_t(n);
        ETE_CHECK(steps_ <= opt_.limits.max_steps,
                  "more than {} loop iterations, macro calls and items (a hostile or runaway "
                  "template?)",
                  opt_.limits.max_steps);
    }
    void check_size(const Value& v) const {
        if (v.is_string())
            ETE_CHECK(v.s.size() <= opt_.limits.max_output, "a string of more than {} bytes",
                      opt_.limits.max_output);
        if (v.type == Value::Type::List)
            ETE_CHECK(v.list->items.size() <= opt_.limits.max_items, "a list of more than {} items",
                      opt_.limits.max_items);
    }
    void emit(std::string_view s) {
        out_->append(s);
        ETE_CHECK(out_->size() <= opt_.limits.max_output, "output of more than {} bytes",
                  opt_.limits.max_output);
    }

    Flow exec(const Body& body, Frame& f) {
        for (const StmtPtr& s : body) {
            const Flow flow = exec(*s, f);
            if (flow != Flow::Normal) return flow;
        }
        return Flow::Normal;
    }
    Flow exec(const Stmt& s, Frame& f);
    Flow exec_for(const Stmt& s, Frame& f);
    void exec_set(const Stmt& s, Frame& f);
    std::string capture(const Body& body, Frame& f) {
        std::string buf, *saved = out_;
        out_ = &buf;
        ++capturing_;
        try {
            exec(body, f);
        } catch (...) {
            out_ = saved;
            --capturing_;
            throw;
        }
        out_ = saved;
        --capturing_;
        return buf;
    }

    Value eval(const Expr& e, Frame& f);
    Value eval_call(const Expr& e, Frame& f);
    Value eval_literal(const Expr& e, Frame& f);   // List, Tuple, Dict
    Value eval_operator(const Expr& e, Frame& f);  // not, -, +, binary, compare, and/or, if
    Value call_macro(const MacroStmt& m, const Args& args);
    Args eval_args(const Expr& e, size_t first, Frame& f) {
        Args a;
        for (size_t k = first; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k], f));
        for (const auto& [name, x] : e.kwargs) a.kw.emplace_back(name, eval(*x, f));
        return a;
    }

    const RenderOptions& opt_;
    Rendered& result_;
    std::string* out_;
    Frame* root_ = nullptr;
    BuiltinEnv env_;
    int64_t steps_ = 0;
    int depth_ = 0, capturing_ = 0, line_ = 1;
};

Flow Renderer::exec(const Stmt& s, Frame& f) {
    line_ = s.line;
    switch (s.kind) {
        case Stmt::Kind::Text:
            emit(s.text);
            break;
        case Stmt::Kind::Print: {
            const Value v = eval(*s.expr, f);
            line_ = s.line;
            emit(to_str(v));
            break;
        }
        case Stmt::Kind::If:
            for (const auto& [cond, body] : s.branches) {
                if (!cond || truthy(eval(*cond, f))) return exec(body, f);
            }
            break;
        case Stmt::Kind::For:
            return exec_for(s, f);
        case Stmt::Kind::Set:
            exec_set(s, f);
            break;
        case Stmt::Kind::SetBlock:
            f.set(s.targets[0], Value::string(capture(s.body, f)));
            break;
        case Stmt::Kind::Macro:
            f.set(s.macro->name, Value::callable(s.macro->name, s.macro.get()));
            break;
        case Stmt::Kind::Break:
            return Flow::Break;
        case Stmt::Kind::Continue:
            return Flow::Continue;
        case Stmt::Kind::Generation: {
            ETE_CHECK(capturing_ == 0, "'generation' inside a block set is not supported");
            const size_t begin = out_->size();
            const Flow flow = exec(s.body, f);
            result_.generation_spans.emplace_back(begin, out_->size());
            return flow;
        }
    }
    return Flow::Normal;
}

// loop.* of item k of n (Jinja's LoopContext, depth 1: loops are not recursive here).
Value loop_info(const std::vector<Value>& items, size_t k) {
    auto d = std::make_shared<DictObj>();
    const auto n = int64_t(items.size()), i = int64_t(k);
    d->set("index", Value::integer(i + 1));
    d->set("index0", Value::integer(i));
    d->set("revindex", Value::integer(n - i));
    d->set("revindex0", Value::integer(n - i - 1));
    d->set("first", Value::boolean(i == 0));
    d->set("last", Value::boolean(i == n - 1));
    d->set("length", Value::integer(n));
    d->set("depth", Value::integer(1));
    d->set("depth0", Value::integer(0));
    d->set("previtem", k > 0 ? items[k - 1] : Value::undefined("there is no previous item"));
    d->set("nextitem", k + 1 < items.size() ? items[k + 1] : Value::undefined("no next item"));
    return Value::mapping(d);
}

void bind_targets(Frame& f, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
        f.set(targets[0], v);
        return;
    }
    ETE_CHECK(v.type == Value::Type::List || v.is_string(), "cannot unpack a '{}' into {} names",
              type_name(v), targets.size());
    const std::vector<Value> parts = iterate(v);
    ETE_CHECK(parts.size() == targets.size(), "cannot unpack {} values into {} names", parts.size(),
              targets.size());
    for (size_t k = 0; k < targets.size(); ++k) f.set(targets[k], parts[k]);
}

Flow Renderer::exec_for(const Stmt& s, Frame& f) {
    const Value seq = eval(*s.expr, f);
    line_ = s.line;
    std::vector<Value> items = iterate(seq);
    if (s.cond) {  // the inline `if` filters before the loop counts (loop.length, loop.last)
        std::vector<Value> kept;
        for (const Value& item : items) {
            steps(1);
            Frame tmp{{}, &f};
            bind_targets(tmp, s.targets, item);
            if (truthy(eval(*s.cond, tmp))) kept.push_back(item);
        }
        items = std::move(kept);
    }
    for (size_t k = 0; k < items.size(); ++k) {
        steps(1);
        Frame it{{}, &f};
        it.set("loop", loop_info(items, k));
        bind_targets(it, s.targets, items[k]);
        if (exec(s.body, it) == Flow::Break) break;
    }
    if (items.empty()) return exec(s.else_body, f);
    return Flow::Normal;
}

void Renderer::exec_set(const Stmt& s, Frame& f) {
    Value v = eval(*s.expr, f);
    line_ = s.line;
    if (s.attr.empty()) {
        bind_targets(f, s.targets, v);
        return;
    }
    Value* ns = f.find(s.targets[0]);
    ETE_CHECK(ns && ns->type == Value::Type::Namespace,
              "cannot set attribute '{}' of '{}': only a namespace() takes attributes", s.attr,
              s.targets[0]);
    ns->dict->set(s.attr, std::move(v));
}

Value Renderer::eval(const Expr& e, Frame& f) {
    using K = Expr::Kind;
    line_ = e.line;
    switch (e.kind) {
        case K::Const:
            return e.value;
        case K::Name: {
            const Value* v = f.find(e.name);
            return v ? *v : Value::undefined(fmt::format("'{}' is undefined", e.name));
        }
        case K::List:
        case K::Tuple:
        case K::Dict:
            return eval_literal(e, f);
        case K::GetAttr: {
            const Value obj = eval(*e.args[0], f);
            line_ = e.line;
            check_defined(obj);
            return get_attr(obj, e.name);
        }
        case K::GetItem: {
            const Value obj = eval(*e.args[0], f), key = eval(*e.args[1], f);
            line_ = e.line;
            check_defined(obj);
            return get_item(obj, key);
        }
        case K::Slice: {
            const Value obj = eval(*e.args[0], f);
            Value part[3];
            for (int k = 0; k < 3; ++k)
                if (e.args[size_t(k) + 1]) part[k] = eval(*e.args[size_t(k) + 1], f);
            line_ = e.line;
            check_defined(obj);
            return get_slice(obj, part[0], part[1], part[2]);
        }
        case K::Call:
            return eval_call(e, f);
        case K::Filter: {
            const Value subject = eval(*e.args[0], f);
            const Args args = eval_args(e, 1, f);
            line_ = e.line;
            Value v = apply_filter(e.name, subject, args, env_);
            check_size(v);
            return v;
        }
        case K::Test: {
            const Value subject = eval(*e.args[0], f);
            const Args args = eval_args(e, 1, f);
            line_ = e.line;
            return Value::boolean(apply_test(e.name, subject, args));
        }
        default:
            return eval_operator(e, f);
    }
    return {};
}

Value Renderer::eval_literal(const Expr& e, Frame& f) {
    using K = Expr::Kind;
    switch (e.kind) {
        case K::List:
        case K::Tuple: {
            std::vector<Value> items;
            for (const ExprPtr& x : e.args) items.push_back(eval(*x, f));
            return Value::sequence(std::move(items),
                                   e.kind == K::Tuple ? SeqKind::Tuple : SeqKind::List);
        }
        case K::Dict: {
            auto d = std::make_shared<DictObj>();
            for (size_t k = 0; k < e.args.size(); k += 2) {
                Value key = eval(*e.args[k], f);
                line_ = e.line;
                ETE_CHECK(key.is_string(), "dict keys must be strings, not '{}'", type_name(key));
                d->set(key.s, eval(*e.args[k + 1], f));
            }
            return Value::mapping(d);
        }
        default:
            ETE_ASSERT(false);
    }
    return {};
}

Value Renderer::eval_operator(const Expr& e, Frame& f) {
    using K = Expr::Kind;
    switch (e.kind) {
        case K::Not:
            return Value::boolean(!truthy(eval(*e.args[0], f)));
        case K::Neg:
        case K::Pos: {
            const Value v = eval(*e.args[0], f);
            line_ = e.line;
            check_defined(v);
            ETE_CHECK(v.is_number(), "bad operand type for unary {}: '{}'",
                      e.kind == K::Neg ? '-' : '+', type_name(v));
            if (e.kind == K::Pos) return v.is_bool() ? Value::integer(v.as_int()) : v;
            if (v.type == Value::Type::Float) return Value::number(-v.f);
            ETE_CHECK(v.as_int() != INT64_MIN, "integer overflow");
            return Value::integer(-v.as_int());
        }
        case K::Binary: {
            const Value a = eval(*e.args[0], f), b = eval(*e.args[1], f);
            line_ = e.line;
            Value v = binary_op(e.name, a, b, opt_.limits);
            check_size(v);
            return v;
        }
        case K::Compare: {
            Value left = eval(*e.args[0], f);
            for (size_t k = 0; k < e.ops.size(); ++k) {
                Value right = eval(*e.args[k + 1], f);
                line_ = e.line;
                if (!compare_op(e.ops[k], left, right)) return Value::boolean(false);
                left = std::move(right);
            }
            return Value::boolean(true);
        }
        case K::And: {
            Value a = eval(*e.args[0], f);
            return truthy(a) ? eval(*e.args[1], f) : a;
        }
        case K::Or: {
            Value a = eval(*e.args[0], f);
            return truthy(a) ? a : eval(*e.args[1], f);
        }
        case K::Cond:
            if (truthy(eval(*e.args[0], f))) return eval(*e.args[1], f);
            return e.args[2] ? eval(*e.args[2], f)
                             : Value::undefined("the conditional expression has no else");
        default:
            ETE_ASSERT(false);
    }
    return {};
}

Value Renderer::eval_call(const Expr& e, Frame& f) {
    const Value callee = eval(*e.args[0], f);
    const Args args = eval_args(e, 1, f);
    line_ = e.line;
    check_defined(callee);
    ETE_CHECK(callee.type == Value::Type::Callable, "'{}' object is not callable",
              type_name(callee));
    const CallableObj& fn = *callee.fn;
    Value v = fn.macro  ? call_macro(*fn.macro, args)
              : fn.self ? call_method(*fn.self, fn.name, args, env_)
                        : call_global(fn.name, args, env_);
    check_size(v);
    return v;
}

Value Renderer::call_macro(const MacroStmt& m, const Args& args) {
    steps(1);
    ETE_CHECK(depth_ < opt_.limits.max_depth, "macro calls nested deeper than {} ('{}')",
              opt_.limits.max_depth, m.name);
    std::vector<std::string_view> names(m.params.begin(), m.params.end());
    const std::vector<std::optional<Value>> bound = jinja::bind(args, names, m.name);
    Frame local{{}, root_};
    for (size_t k = 0; k < m.params.size(); ++k) {
        if (bound[k]) {
            local.set(m.params[k], *bound[k]);
        } else if (m.defaults[k]) {
            local.set(m.params[k], eval(*m.defaults[k], local));
        } else {
            local.set(m.params[k],
                      Value::undefined(
                          fmt::format("missing argument '{}' of macro '{}'", m.params[k], m.name)));
        }
    }
    ++depth_;
    std::string text;
    try {
        text = capture(m.body, local);
    } catch (...) {
        --depth_;
        throw;
    }
    --depth_;
    return Value::string(std::move(text));
}

}  // namespace

Template::Template(std::string_view source)
    : prog_(std::make_unique<Program>(parse(lex(source)))) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

Rendered Template::render(const nlohmann::ordered_json& context, const RenderOptions& opt) const {
    Rendered out;
    Renderer(opt, out).run(*prog_, context);
    return out;
}

}  // namespace ete::jinja
