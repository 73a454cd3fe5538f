// tests/parallel/comm_checks.h — transport-independent checks of the Communicator contract, run
// by every rank of a group: on the fake world (n = 1..4), on self, and under mpirun (np 2/3/4).
// Inputs are derived from the rank and compared with closed-form answers. Values are small
// integers, exact in every dtype (bf16 included: sums stay below 256), so any reduction order
// gives the same bits and the checks are exact for every transport.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ete/core/dtype.h"
#include "ete/core/error.h"
#include "ete/parallel/communicator.h"
#include "test_util.h"

namespace ete::testing {

using Bytes = std::vector<std::byte>;

inline void put(Bytes& b, DType t, size_t i, double v) {
    std::byte* p = b.data() + i * dtype_size(t);
    auto store = [&](auto x) { std::memcpy(p, &x, sizeof x); };
    switch (t) {
        case DType::F32:
            return store(float(v));
        case DType::F64:
            return store(v);
        case DType::BF16:
            return store(f32_to_bf16(float(v)));
        case DType::I32:
            return store(int32_t(v));
        case DType::I64:
            return store(int64_t(v));
        case DType::U8:
            return store(uint8_t(v));
        default:
            FAIL() << "put: unsupported dtype " << dtype_name(t);
    }
}

inline double get(const Bytes& b, DType t, size_t i) {
    const std::byte* p = b.data() + i * dtype_size(t);
    auto load = [&](auto x) {
        std::memcpy(&x, p, sizeof x);
        return x;
    };
    switch (t) {
        case DType::F32:
            return load(float{});
        case DType::F64:
            return load(double{});
        case DType::BF16:
            return bf16_to_f32(load(uint16_t{}));
        case DType::I32:
            return load(int32_t{});
        case DType::I64:
            return double(load(int64_t{}));
        case DType::U8:
            return load(uint8_t{});
        default:
            ADD_FAILURE() << "get: unsupported dtype " << dtype_name(t);
    }
    return NAN;
}

inline Bytes make_buf(DType t, size_t count, const std::function<double(size_t)>& f) {
    Bytes b(count * dtype_size(t));
    for (size_t i = 0; i < count; ++i) put(b, t, i, f(i));
    return b;
}

// One failure per buffer (the first wrong element), not one per element.
inline void expect_elements(const Bytes& b, DType t, size_t count,
                            const std::function<double(size_t)>& want, const std::string& what) {
    for (size_t i = 0; i < count; ++i) {
        if (get(b, t, i) != want(i)) {
            ADD_FAILURE() << what << ": element " << i << " is " << get(b, t, i) << ", expected "
                          << want(i);
            return;
        }
    }
}

inline std::string context(const Communicator& c, const std::string& what) {
    return fmt::format("{} on {} rank {}/{}", what, c.name(), c.rank(), c.size());
}

inline std::string expected_where(const Communicator& c, const std::string& op) {
    return fmt::format("[comm] {} on group {} (world ranks {})", op, c.name(),
                       fmt::join(c.world_ranks(), ","));
}

constexpr size_t kCounts[] = {0, 1, 7, 1000};

// value(r, i) = ±(r + 1)·m(i): the sign alternates with i so Max and Min pick different ranks.
inline double mag(size_t i) {
    return double(i % 13 + 1);
}
inline double sgn(size_t i) {
    return i % 2 == 0 ? 1.0 : -1.0;
}
inline double mag17(size_t j) {
    return double(j % 17 + 1);
}
inline double reduce_value(int r, size_t i) {
    return sgn(i) * (r + 1) * mag(i);
}
inline double reduce_expected(ReduceOp op, int n, size_t i) {
    const double s = sgn(i), m = mag(i);
    switch (op) {
        case ReduceOp::Sum:
            return s * m * n * (n + 1) / 2;
        case ReduceOp::Max:
            return s > 0 ? n * m : -m;
        case ReduceOp::Min:
            return s > 0 ? m : -n * m;
    }
    return NAN;
}

inline void check_all_reduce(Communicator& c) {
    const int n = c.size(), r = c.rank();
    for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64, DType::BF16}) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
            for (size_t count : kCounts) {
                Bytes buf = make_buf(t, count, [&](size_t i) { return reduce_value(r, i); });
                c.all_reduce(buf.data(), count, t, op);
                expect_elements(
                    buf, t, count, [&](size_t i) { return reduce_expected(op, n, i); },
                    context(c, fmt::format("all_reduce {} op {} count {}", dtype_name(t), int(op),
                                           count)));
            }
        }
    }
}

// Inexact values: whatever order a transport reduces in, every rank must get the same bits.
inline void check_all_reduce_identical_on_ranks(Communicator& c) {
    const int n = c.size(), r = c.rank();
    for (DType t : {DType::F32, DType::BF16}) {
        const size_t count = 257;
        Bytes buf = make_buf(t, count, [&](size_t i) { return std::sin(double(r * 1000 + i)); });
        c.all_reduce(buf.data(), count, t, ReduceOp::Sum);
        Bytes all(buf.size() * size_t(n));
        c.all_gather(buf.data(), all.data(), count, t);
        for (int q = 0; q < n; ++q) {
            EXPECT_EQ(0, std::memcmp(all.data() + size_t(q) * buf.size(), buf.data(), buf.size()))
                << context(c, "all_reduce result of rank " + std::to_string(q) + " differs");
        }
    }
}

inline void check_reduce_scatter(Communicator& c) {
    const int n = c.size(), r = c.rank();
    for (DType t : {DType::F32, DType::I64, DType::BF16}) {
        for (size_t k : {size_t(0), size_t(1), size_t(7), size_t(100)}) {
            // send[j] = (r + 1)·(j % 17 + 1): block r of the sum is n(n+1)/2·((r·k + i) % 17 + 1)
            Bytes send = make_buf(t, k * size_t(n), [&](size_t j) { return (r + 1) * mag17(j); });
            Bytes recv = make_buf(t, k, [](size_t) { return -1.0; });
            c.reduce_scatter(send.data(), recv.data(), k, t, ReduceOp::Sum);
            expect_elements(
                recv, t, k, [&](size_t i) { return n * (n + 1) / 2 * mag17(size_t(r) * k + i); },
                context(c, fmt::format("reduce_scatter {} k {}", dtype_name(t), k)));
            Bytes got = make_buf(t, k, [](size_t) { return -1.0; });
            c.reduce_scatter(send.data(), got.data(), k, t, ReduceOp::Max);
            expect_elements(
                got, t, k, [&](size_t i) { return n * mag17(size_t(r) * k + i); },
                context(c, fmt::format("reduce_scatter max {} k {}", dtype_name(t), k)));
        }
    }
}

inline void check_all_gather(Communicator& c) {
    const int n = c.size(), r = c.rank();
    for (DType t : {DType::I32, DType::F64, DType::U8}) {
        for (size_t k : kCounts) {
            auto v = [&](int q, size_t i) { return double((q * 31 + int(i)) % 200); };
            Bytes send = make_buf(t, k, [&](size_t i) { return v(r, i); });
            Bytes recv = make_buf(t, k * size_t(n), [](size_t) { return 255.0; });
            c.all_gather(send.data(), recv.data(), k, t);
            expect_elements(
                recv, t, k * size_t(n), [&](size_t j) { return v(int(j / k), j % k); },
                context(c, fmt::format("all_gather {} k {}", dtype_name(t), k)));
        }
    }
}

// In place: every rank's block already at its place in recv (ZeRO's gather of the masters).
inline void check_all_gather_in_place(Communicator& c) {
    const int n = c.size(), r = c.rank();
    for (DType t : {DType::F32, DType::BF16, DType::U8}) {
        for (size_t k : kCounts) {
            auto v = [&](size_t j) { return double((j * 7 + j / (k ? k : 1)) % 200); };
            Bytes buf = make_buf(t, k * size_t(n), [&](size_t j) {
                return j / (k ? k : 1) == size_t(r) ? v(j) : 255.0;
            });
            const size_t el = dtype_size(t);
            c.all_gather(buf.data() + size_t(r) * k * el, buf.data(), k, t);
            expect_elements(
                buf, t, k * size_t(n), v,
                context(c, fmt::format("all_gather in place {} k {}", dtype_name(t), k)));
        }
    }
}

// reduce: the sum (and max) at the root, blocking and not; other ranks' buffers are unspecified.
inline void check_reduce_every_root(Communicator& c) {
    const int n = c.size(), r = c.rank();
    for (int root = 0; root < n; ++root) {
        for (DType t : {DType::F32, DType::BF16, DType::I64}) {
            for (size_t k : kCounts) {
                Bytes buf = make_buf(t, k, [&](size_t i) { return (r + 1) * mag17(i); });
                c.reduce(buf.data(), k, t, ReduceOp::Sum, root);
                const std::string what =
                    context(c, fmt::format("reduce root {} {} k {}", root, dtype_name(t), k));
                if (r == root)
                    expect_elements(
                        buf, t, k, [&](size_t i) { return n * (n + 1) / 2 * mag17(i); }, what);
                Bytes max = make_buf(t, k, [&](size_t i) { return (r + 1) * mag17(i); });
                c.ireduce(max.data(), k, t, ReduceOp::Max, root)->wait();
                if (r == root)
                    expect_elements(
                        max, t, k, [&](size_t i) { return n * mag17(i); }, what + " max");
            }
        }
    }
}

inline void check_broadcast_every_root(Communicator& c) {
    for (int root = 0; root < c.size(); ++root) {
        for (DType t : {DType::F32, DType::BF16, DType::I64}) {
            for (size_t count : kCounts) {
                auto v = [&](size_t i) { return double(root * 50 + int(i % 100)); };
                Bytes buf =
                    make_buf(t, count, [&](size_t i) { return c.rank() == root ? v(i) : -1; });
                c.broadcast(buf.data(), count, t, root);
                expect_elements(buf, t, count, v,
                                context(c, fmt::format("broadcast root {} {} count {}", root,
                                                       dtype_name(t), count)));
                // The non-blocking form, completed by wait().
                Bytes ibuf =
                    make_buf(t, count, [&](size_t i) { return c.rank() == root ? v(i) : -2; });
                c.ibroadcast(ibuf.data(), count, t, root)->wait();
                expect_elements(ibuf, t, count, v,
                                context(c, fmt::format("ibroadcast root {} {} count {}", root,
                                                       dtype_name(t), count)));
            }
        }
    }
}

// Ring: rank r sends to r+1 and receives from r-1. Even ranks send first and odd ranks receive
// first, so blocking calls cannot all wait on each other; isend+irecv covers the rest.
inline void check_send_recv_ring(Communicator& c) {
    const int n = c.size(), r = c.rank();
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    auto v = [](int q, size_t i) { return double((q * 7 + int(i)) % 1000); };
    for (size_t count : kCounts) {
        Bytes send = make_buf(DType::F32, count, [&](size_t i) { return v(r, i); });
        Bytes recv = make_buf(DType::F32, count, [](size_t) { return -1.0; });
        if (n == 1) {
            Request s = c.isend(send.data(), count, DType::F32, next, 3);
            c.recv(recv.data(), count, DType::F32, prev, 3);
            s->wait();
        } else if (r % 2 == 0) {
            c.send(send.data(), count, DType::F32, next, 3);
            c.recv(recv.data(), count, DType::F32, prev, 3);
        } else {
            c.recv(recv.data(), count, DType::F32, prev, 3);
            c.send(send.data(), count, DType::F32, next, 3);
        }
        expect_elements(
            recv, DType::F32, count, [&](size_t i) { return v(prev, i); },
            context(c, fmt::format("ring count {}", count)));
    }
}

// Messages with tags 1, 2, 1 are received as tag 2 first, then the two tag-1 ones in send order.
inline void check_tags_out_of_order(Communicator& c) {
    const int n = c.size(), r = c.rank();
    const int to = (r + 1) % n, from = (r + n - 1) % n;
    const int64_t a = 100 * r + 1, b = 100 * r + 2, d = 100 * r + 3;
    std::vector<Request> sends;
    sends.push_back(c.isend(&a, 1, DType::I64, to, 1));
    sends.push_back(c.isend(&b, 1, DType::I64, to, 2));
    sends.push_back(c.isend(&d, 1, DType::I64, to, 1));
    int64_t got_b = -1, got_a = -1, got_d = -1;
    c.recv(&got_b, 1, DType::I64, from, 2);
    c.recv(&got_a, 1, DType::I64, from, 1);
    c.recv(&got_d, 1, DType::I64, from, 1);
    wait_all(sends);
    EXPECT_TRUE(sends.empty());
    EXPECT_EQ(got_b, 100 * from + 2) << context(c, "tag 2");
    EXPECT_EQ(got_a, 100 * from + 1) << context(c, "first tag 1");
    EXPECT_EQ(got_d, 100 * from + 3) << context(c, "second tag 1");
}

// Every rank exchanges with every rank (itself included) through isend/irecv; the receives for
// one (source, tag) are matched in the order they were posted even when waited in reverse.
inline void check_isend_irecv_all_to_all(Communicator& c) {
    const int n = c.size(), r = c.rank();
    const size_t k = 7;
    std::vector<Bytes> first(static_cast<size_t>(n)), second(static_cast<size_t>(n));
    std::vector<Request> recvs, sends;
    for (int p = 0; p < n; ++p) {
        first[size_t(p)] = make_buf(DType::I32, k, [](size_t) { return -1.0; });
        second[size_t(p)] = make_buf(DType::I32, k, [](size_t) { return -1.0; });
        recvs.push_back(c.irecv(first[size_t(p)].data(), k, DType::I32, p, 9));
        recvs.push_back(c.irecv(second[size_t(p)].data(), k, DType::I32, p, 9));
    }
    std::vector<Bytes> out;
    out.reserve(2 * size_t(n));
    for (int p = 0; p < n; ++p) {
        for (int m = 0; m < 2; ++m) {
            out.push_back(
                make_buf(DType::I32, k, [&](size_t i) { return 1000 * m + 10 * r + p + i; }));
            sends.push_back(c.isend(out.back().data(), k, DType::I32, p, 9));
        }
    }
    for (auto it = recvs.rbegin(); it != recvs.rend(); ++it) (*it)->wait();
    for (auto& q : recvs) EXPECT_TRUE(q->test());
    wait_all(sends);
    for (int p = 0; p < n; ++p) {
        expect_elements(
            first[size_t(p)], DType::I32, k, [&](size_t i) { return 10 * p + r + i; },
            context(c, fmt::format("first message from {}", p)));
        expect_elements(
            second[size_t(p)], DType::I32, k, [&](size_t i) { return 1000 + 10 * p + r + i; },
            context(c, fmt::format("second message from {}", p)));
    }
}

// Several non-blocking collectives in flight at once, waited for in reverse order.
inline void check_nonblocking_collectives(Communicator& c) {
    const int n = c.size(), r = c.rank();
    Bytes sum = make_buf(DType::F32, 7, [&](size_t i) { return reduce_value(r, i); });
    Bytes gather_in = make_buf(DType::I64, 3, [&](size_t i) { return 10.0 * r + i; });
    Bytes gather = make_buf(DType::I64, 3 * size_t(n), [](size_t) { return -1.0; });
    Bytes rs_in =
        make_buf(DType::F64, 2 * size_t(n), [&](size_t j) { return (r + 1) * (j + 1.0); });
    Bytes rs = make_buf(DType::F64, 2, [](size_t) { return -1.0; });
    std::vector<Request> reqs;
    reqs.push_back(c.iall_reduce(sum.data(), 7, DType::F32, ReduceOp::Sum));
    reqs.push_back(c.iall_gather(gather_in.data(), gather.data(), 3, DType::I64));
    reqs.push_back(c.ireduce_scatter(rs_in.data(), rs.data(), 2, DType::F64, ReduceOp::Sum));
    for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) (*it)->wait();
    expect_elements(
        sum, DType::F32, 7, [&](size_t i) { return reduce_expected(ReduceOp::Sum, n, i); },
        context(c, "iall_reduce"));
    expect_elements(
        gather, DType::I64, 3 * size_t(n),
        [&](size_t j) { return 10.0 * double(j / 3) + double(j % 3); }, context(c, "iall_gather"));
    expect_elements(
        rs, DType::F64, 2, [&](size_t i) { return n * (n + 1) / 2 * (2.0 * r + i + 1); },
        context(c, "ireduce_scatter"));
}

// Two groups by parity (key -r: reversed order); with n >= 3 the last rank opts out (color -1).
inline void check_split(Communicator& c) {
    const int n = c.size(), r = c.rank();
    const bool out = n >= 3 && r == n - 1;
    const int color = out ? -1 : r % 2;
    auto g = c.split(color, -r, fmt::format("half[{}]", color));
    if (out) {
        EXPECT_EQ(g, nullptr) << context(c, "split color -1");
        return;
    }
    ASSERT_NE(g, nullptr);
    std::vector<int> members;  // world ranks, by descending parent rank
    for (int q = n - 1; q >= 0; --q) {
        if (q % 2 == color && !(n >= 3 && q == n - 1))
            members.push_back(c.world_ranks()[size_t(q)]);
    }
    EXPECT_EQ(g->name(), fmt::format("half[{}]", color));
    EXPECT_EQ(g->transport(), c.transport());
    EXPECT_EQ(g->world_ranks(), members) << context(c, "split world_ranks");
    ASSERT_EQ(g->size(), int(members.size()));
    EXPECT_EQ(g->world_ranks()[size_t(g->rank())], c.world_ranks()[size_t(r)]);
    EXPECT_EQ(g->timeout(), c.timeout());
    int64_t x = c.world_ranks()[size_t(r)] + 1;
    g->all_reduce(&x, 1, DType::I64, ReduceOp::Sum);
    int64_t want = 0;
    for (int m : members) want += m + 1;
    EXPECT_EQ(x, want) << context(c, "all_reduce in split group");
    // Equal keys keep the parent's order; a split of a split keeps world ranks.
    auto same = g->split(0, 0, "again");
    ASSERT_NE(same, nullptr);
    EXPECT_EQ(same->world_ranks(), g->world_ranks());
    EXPECT_EQ(same->rank(), g->rank());
    EXPECT_EQ(error_of([&] { g->barrier(); }), "<no error>");  // the parent group still works
}

// Rank 0 creates its file only after a pause; nobody may pass the barrier before it exists.
// (All ranks share one /tmp: threads of the fake, or mpirun processes on one machine.)
inline void check_barrier(Communicator& c) {
    static std::atomic<int> counter{0};
    int64_t id[2] = {int64_t(::getpid()), c.rank() == 0 ? int64_t(counter++) : -1};
    c.broadcast(id, 2, DType::I64, 0);
    const auto dir = std::filesystem::temp_directory_path() /
                     fmt::format("ete_barrier_{}_{}_{}", id[0], id[1], c.name());
    const auto mark = dir / "rank0";
    if (c.rank() == 0) {
        std::filesystem::create_directories(dir);
        usleep(20000);  // let the others reach the barrier first if it does not wait
        std::FILE* f = std::fopen(mark.c_str(), "w");
        ASSERT_NE(f, nullptr);
        std::fclose(f);
    }
    c.barrier();
    EXPECT_TRUE(std::filesystem::exists(mark)) << context(c, "passed the barrier before rank 0");
    c.barrier();
    if (c.rank() == 0) std::filesystem::remove_all(dir);
}

// A communication thread reduces on its own communicator while the calling thread exchanges
// messages on c (the data-parallel overlap pattern; needs MPI_THREAD_MULTIPLE under MPI).
inline void check_comm_thread_beside_main_thread(Communicator& c) {
    const int n = c.size(), r = c.rank();
    auto side = c.split(0, r, "side");
    ASSERT_NE(side, nullptr);
    constexpr int kRounds = 20;
    std::vector<double> sums(kRounds, -1);
    std::string side_error;
    std::thread comm_thread([&] {
        side_error = error_of([&] {
            for (int k = 0; k < kRounds; ++k) {
                double x = r + k;
                side->all_reduce(&x, 1, DType::F64, ReduceOp::Sum);
                sums[size_t(k)] = x;
            }
        });
    });
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (int k = 0; k < kRounds; ++k) {
        const int64_t out = 100 * k + r;
        int64_t in = -1;
        Request rr = c.irecv(&in, 1, DType::I64, prev, 5);
        Request sr = c.isend(&out, 1, DType::I64, next, 5);
        rr->wait();
        sr->wait();
        EXPECT_EQ(in, 100 * k + prev) << context(c, "ring beside the comm thread");
    }
    comm_thread.join();
    EXPECT_EQ(side_error, "<no error>");
    for (int k = 0; k < kRounds; ++k) {
        EXPECT_EQ(sums[size_t(k)], n * (n - 1) / 2 + double(n) * k) << context(c, "comm thread");
    }
}

// Bad arguments throw on the calling rank before anything is sent, naming op, group and ranks.
inline void check_argument_errors(Communicator& c) {
    float f = 0;
    uint16_t h = 0;
    const std::string ar = error_of([&] { c.all_reduce(&h, 1, DType::F16, ReduceOp::Sum); });
    EXPECT_EQ(ar.rfind(expected_where(c, "all_reduce") + ": cannot reduce F16", 0), 0u) << ar;
    const std::string peer = error_of([&] { c.send(&f, 1, DType::F32, c.size(), 0); });
    EXPECT_EQ(peer.rfind(expected_where(c, "send") + ": peer " + std::to_string(c.size()), 0), 0u)
        << peer;
    const std::string tag = error_of([&] { c.irecv(&f, 1, DType::F32, 0, kMaxTag + 1); });
    EXPECT_NE(tag.find("tag 32768 is out of range (expected 0..32767)"), std::string::npos) << tag;
    EXPECT_NE(error_of([&] { c.send(&f, 1, DType::F32, 0, -1); }).find("tag -1"),
              std::string::npos);
    const std::string root = error_of([&] { c.broadcast(&f, 1, DType::F32, -1); });
    EXPECT_EQ(root.rfind(expected_where(c, "broadcast") + ": root -1", 0), 0u) << root;
    EXPECT_NE(error_of([&] { c.set_timeout(-1); }).find("timeout -1 s"), std::string::npos);
}

// Every check in order; all ranks of c call this together.
inline void run_all_checks(Communicator& c) {
    check_argument_errors(c);
    check_all_reduce(c);
    check_all_reduce_identical_on_ranks(c);
    check_reduce_scatter(c);
    check_all_gather(c);
    check_all_gather_in_place(c);
    check_reduce_every_root(c);
    check_broadcast_every_root(c);
    check_send_recv_ring(c);
    check_tags_out_of_order(c);
    check_isend_irecv_all_to_all(c);
    check_nonblocking_collectives(c);
    check_split(c);
    check_barrier(c);
    check_comm_thread_beside_main_thread(c);
}

}  // namespace ete::testing
