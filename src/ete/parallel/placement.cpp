// ete/parallel/placement.cpp — the exact placement search of placement.h.
#include "ete/parallel/placement.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "ete/core/error.h"

namespace ete {

namespace {

constexpr double kEps = 1e-9;  // relative: costs summed in another order differ by rounding only

// A group whose slowest link counts: a tp or dp group (every pair) or a pp chain (neighbours).
struct Unit {
    int axis;  // 0 tp, 1 dp, 2 pp
    std::vector<int> ranks;
};

double axis_bytes(const AxisBytes& b, int axis) {
    return axis == 0 ? b.tp : axis == 1 ? b.dp : b.pp;
}

std::vector<Unit> units_of(const MeshShape& m) {
    std::vector<Unit> out;
    const MeshAxis axes[3] = {MeshAxis::Tp, MeshAxis::Dp, MeshAxis::Pp};
    const int sizes[3] = {m.tp, m.dp, m.pp};
    for (int a = 0; a < 3; ++a) {
        if (sizes[a] < 2) continue;
        for (int r = 0; r < m.size(); ++r) {
            std::vector<int> g = mesh_group_ranks(m, axes[a], r);
            if (*std::min_element(g.begin(), g.end()) == r) out.push_back({a, std::move(g)});
        }
    }
    return out;
}

// The pairs of a unit whose link counts, as (earlier, later) in mesh order.
std::vector<std::pair<int, int>> unit_pairs(const Unit& u) {
    std::vector<std::pair<int, int>> p;
    const int n = int(u.ranks.size());
    for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j)
            if (u.axis != 2 || j == i + 1)
                p.push_back({std::min(u.ranks[i], u.ranks[j]), std::max(u.ranks[i], u.ranks[j])});
    return p;
}

std::vector<std::vector<double>> seconds_per_byte(const DeviceLinks& l) {
    const int n = l.size();
    ETE_CHECK(int(l.gbps.size()) == n, "placement: {} devices but {} rows of link bandwidths", n,
              l.gbps.size());
    std::vector<std::vector<double>> t(size_t(n), std::vector<double>(size_t(n), 0.0));
    for (int a = 0; a < n; ++a) {
        ETE_CHECK(int(l.gbps[a].size()) == n,
                  "placement: link row {} has {} bandwidths, expected {}", a, l.gbps[a].size(), n);
        for (int b = 0; b < n; ++b) {
            if (a == b) continue;
            ETE_CHECK(l.gbps[a][b] > 0, "placement: link {} - {}: bandwidth {} GB/s, expected > 0",
                      a, b, l.gbps[a][b]);
            t[a][b] = 1.0 / (l.gbps[a][b] * 1e9);
        }
    }
    return t;
}

// The distinct link times of a table, ascending (a cluster has a few link classes, not n² of
// them: collected through a set).
std::vector<double> distinct_times(const std::vector<std::vector<double>>& t) {
    std::set<double> v;
    for (size_t a = 0; a < t.size(); ++a)
        for (size_t b = a + 1; b < t.size(); ++b) v.insert(t[a][b]);
    return {v.begin(), v.end()};
}

// The cost of a placement on a table of link times (placement_cost).
PlacementCost cost_on(const MeshShape& mesh, const DeviceLinks& links,
                      const std::vector<std::vector<double>>& t, const AxisBytes& bytes,
                      const std::vector<int>& device_of_rank);

// For each of the table's distinct link times τ (ascending), the sizes of the components of the
// devices joined by links of time ≤ τ.
std::vector<std::vector<int>> component_sizes(const std::vector<std::vector<double>>& t,
                                              const std::vector<double>& values) {
    const int n = int(t.size());
    std::vector<std::vector<int>> out;
    for (double tau : values) {
        std::vector<int> parent(static_cast<size_t>(n));
        std::iota(parent.begin(), parent.end(), 0);
        std::function<int(int)> find = [&](int x) {
            return parent[x] == x ? x : parent[x] = find(parent[x]);
        };
        for (int a = 0; a < n; ++a)
            for (int b = a + 1; b < n; ++b)
                if (t[a][b] <= tau) parent[find(a)] = find(b);
        std::map<int, int> size;
        for (int a = 0; a < n; ++a) ++size[find(a)];
        out.emplace_back();
        for (const auto& [root, k] : size) out.back().push_back(k);
    }
    return out;
}

// The lower bound of an axis's slowest-group link time (s/byte): the smallest link time τ at which
// the components of {links with time ≤ τ} hold `groups` disjoint sets of g devices.
double axis_floor(const std::vector<double>& values, const std::vector<std::vector<int>>& comps,
                  int g, int groups) {
    if (g < 2 || groups < 1) return 0;
    for (size_t i = 0; i < values.size(); ++i) {
        int fit = 0;
        for (int k : comps[i]) fit += k / g;
        if (fit >= groups) return values[i];
    }
    return values.empty() ? 0 : values.back();
}

bool better(double cost, double spread, const PlacementCost& best) {
    if (cost < best.cost_s * (1 - kEps)) return true;
    return cost <= best.cost_s * (1 + kEps) && spread < best.spread_s * (1 - kEps);
}

class Search {
  public:
    Search(const MeshShape& m, const DeviceLinks& l, const std::vector<std::vector<double>>& t,
           const AxisBytes& b, int64_t budget)
        : mesh_(m), links_(l), t_(t), budget_(budget) {
        const int n = m.size();
        const std::vector<double> values = distinct_times(t_);
        const std::vector<std::vector<int>> comps = component_sizes(t_, values);
        const std::vector<Unit> units = units_of(m);
        weight_.resize(units.size());
        axis_of_.resize(units.size());
        edges_.resize(size_t(n));
        const int sizes[3] = {m.tp, m.dp, m.pp};
        for (int a = 0; a < 3; ++a) {
            bytes_[a] = axis_bytes(b, a);
            floor_[a] = axis_floor(values, comps, sizes[a], n / std::max(sizes[a], 1));
            one_[a] = axis_floor(values, comps, sizes[a], 1);
        }
        for (size_t u = 0; u < units.size(); ++u) {
            axis_of_[u] = units[u].axis;
            weight_[u] = bytes_[units[u].axis];
            for (auto [q, r] : unit_pairs(units[u])) edges_[size_t(r)].push_back({q, int(u)});
            spread_ += weight_[u] * one_[units[u].axis];
        }
        unit_max_.assign(units.size(), 0.0);
        classes();
    }

    double lower_bound() const {
        double lb = 0;
        for (int a = 0; a < 3; ++a) lb += bytes_[a] * floor_[a];
        return lb;
    }
    double spread_floor() const { return spread_; }  // before any rank is placed

    Placement run(const std::vector<int>& incumbent, const PlacementCost& cost) {
        best_.device_of_rank = incumbent;
        best_.cost = cost;
        dev_.assign(size_t(mesh_.size()), -1);
        used_.assign(size_t(links_.size()), 0);
        free_in_node_.assign(size_t(nodes_), 0);
        for (int d = 0; d < links_.size(); ++d) ++free_in_node_[size_t(links_.node[d])];
        finished_ = true;
        dfs(0);
        best_.lower_bound_s = lower_bound();
        best_.optimal = finished_ || (best_.cost.cost_s <= best_.lower_bound_s * (1 + kEps) &&
                                      best_.cost.spread_s <= spread_floor() * (1 + kEps));
        best_.steps = steps_;
        return best_;
    }

  private:
    struct Edge {
        int q, unit;
    };
    struct Undo {
        int unit;
        double unit_old;
        int axis;
        double axis_old;
    };

    // Interchangeable devices (a transposition that keeps every link) and nodes (swapping the
    // k-th devices of two nodes keeps every link), computed within a node and across like nodes.
    void classes() {
        const int n = links_.size();
        nodes_ = 0;
        for (int d = 0; d < n; ++d) nodes_ = std::max(nodes_, links_.node[d] + 1);
        members_.assign(size_t(nodes_), {});
        for (int d = 0; d < n; ++d) members_[size_t(links_.node[d])].push_back(d);
        dclass_.assign(size_t(n), -1);
        for (const std::vector<int>& m : members_)
            for (size_t i = 0; i < m.size(); ++i) {
                dclass_[m[i]] = m[i];
                for (size_t j = 0; j < i; ++j)
                    if (dclass_[m[j]] == m[j] && transposable(m[i], m[j])) {
                        dclass_[m[i]] = m[j];
                        break;
                    }
            }
        nclass_.assign(size_t(nodes_), -1);
        for (int a = 0; a < nodes_; ++a) {
            nclass_[a] = a;
            for (int b = 0; b < a; ++b)
                if (nclass_[b] == b && swappable(b, a)) {
                    nclass_[a] = b;
                    break;
                }
        }
    }
    bool transposable(int d, int e) const {
        for (int x = 0; x < links_.size(); ++x)
            if (x != d && x != e && t_[d][x] != t_[e][x]) return false;
        return true;
    }
    bool swappable(int na, int nb) const {
        const std::vector<int>&A = members_[na], &B = members_[nb];
        if (A.size() != B.size()) return false;
        for (size_t i = 0; i < A.size(); ++i) {
            for (size_t j = 0; j < A.size(); ++j)
                if (t_[A[i]][A[j]] != t_[B[i]][B[j]] || t_[A[i]][B[j]] != t_[B[i]][A[j]])
                    return false;
            for (int x = 0; x < links_.size(); ++x) {
                const int nx = links_.node[x];
                if (nx != na && nx != nb && t_[A[i]][x] != t_[B[i]][x]) return false;
            }
        }
        return true;
    }

    double primary() const {
        double c = 0;
        for (int a = 0; a < 3; ++a) c += bytes_[a] * std::max(axis_max_[a], floor_[a]);
        return c;
    }

    void place(int r, int d, std::vector<Undo>& undo) {
        dev_[r] = d;
        used_[d] = 1;
        --free_in_node_[size_t(links_.node[d])];
        for (const Edge& e : edges_[r]) {
            const double v = t_[d][dev_[e.q]];
            if (v <= unit_max_[e.unit]) continue;
            const int a = axis_of_[e.unit];
            undo.push_back({e.unit, unit_max_[e.unit], a, axis_max_[a]});
            spread_ +=
                weight_[e.unit] * (std::max(v, one_[a]) - std::max(unit_max_[e.unit], one_[a]));
            unit_max_[e.unit] = v;
            axis_max_[a] = std::max(axis_max_[a], v);
        }
    }
    void unplace(int r, std::vector<Undo>& undo) {
        for (size_t i = undo.size(); i-- > 0;) {
            const Undo& u = undo[i];
            const int a = u.axis;
            spread_ += weight_[u.unit] *
                       (std::max(u.unit_old, one_[a]) - std::max(unit_max_[u.unit], one_[a]));
            unit_max_[u.unit] = u.unit_old;
            axis_max_[a] = u.axis_old;
        }
        undo.clear();
        used_[dev_[r]] = 0;
        ++free_in_node_[size_t(links_.node[dev_[r]])];
        dev_[r] = -1;
    }

    // The devices worth trying for the next rank: one of each interchangeable set.
    std::vector<int> candidates() {
        std::vector<int> out;
        std::vector<char> fresh_seen(size_t(nodes_), 0);
        for (int nd = 0; nd < nodes_; ++nd) {
            const std::vector<int>& m = members_[nd];
            if (free_in_node_[nd] == 0) continue;
            if (free_in_node_[nd] == int(m.size())) {
                if (fresh_seen[nclass_[nd]]) continue;
                fresh_seen[nclass_[nd]] = 1;
            }
            budget_ -= int64_t(m.size());
            for (size_t i = 0; i < m.size(); ++i) {
                if (used_[m[i]]) continue;
                bool dup = false;
                for (size_t j = 0; j < i && !dup; ++j)
                    dup = !used_[m[j]] && dclass_[m[j]] == dclass_[m[i]];
                if (!dup) out.push_back(m[i]);
            }
        }
        return out;
    }

    void dfs(int r) {
        ++steps_;
        if (r == mesh_.size()) {
            PlacementCost c;
            c.tp_s = bytes_[0] * axis_max_[0];
            c.dp_s = bytes_[1] * axis_max_[1];
            c.pp_s = bytes_[2] * axis_max_[2];
            c.cost_s = c.tp_s + c.dp_s + c.pp_s;
            c.spread_s = spread_;  // exact here: every unit's max is at least its floor
            if (better(c.cost_s, c.spread_s, best_.cost))
                best_.device_of_rank = dev_, best_.cost = c;
            return;
        }
        if (budget_ <= 0) {
            finished_ = false;
            return;
        }
        std::vector<std::pair<std::pair<double, double>, int>> order;
        std::vector<Undo> undo;
        for (int d : candidates()) {
            place(r, d, undo);
            budget_ -= int64_t(edges_[r].size()) + 1;
            order.push_back({{primary(), spread_}, d});
            unplace(r, undo);
        }
        std::sort(order.begin(), order.end());
        for (const auto& [bound, d] : order) {
            // Cut: neither the cost nor (at an equal cost) the spread can beat the best.
            if (!better(bound.first, bound.second, best_.cost)) continue;
            place(r, d, undo);
            dfs(r + 1);
            unplace(r, undo);
            if (budget_ <= 0) {
                finished_ = false;
                return;
            }
        }
    }

    const MeshShape mesh_;
    const DeviceLinks& links_;
    const std::vector<std::vector<double>>& t_;  // place_ranks's, outlives the search
    int64_t budget_;
    double bytes_[3] = {0, 0, 0}, floor_[3] = {0, 0, 0}, one_[3] = {0, 0, 0};
    double axis_max_[3] = {0, 0, 0};
    double spread_ = 0;  // Σ weight × max(unit max, one group's floor): the spread's bound
    std::vector<double> weight_, unit_max_;
    std::vector<int> axis_of_;
    std::vector<std::vector<Edge>> edges_;  // per rank: its pairs with earlier ranks
    int nodes_ = 0;
    std::vector<std::vector<int>> members_;
    std::vector<int> dclass_, nclass_, dev_, free_in_node_;
    std::vector<char> used_;
    Placement best_;
    bool finished_ = true;
    int64_t steps_ = 0;
};

}  // namespace

namespace {

PlacementCost cost_on(const MeshShape& mesh, const DeviceLinks& links,
                      const std::vector<std::vector<double>>& t, const AxisBytes& bytes,
                      const std::vector<int>& device_of_rank) {
    double axis_max[3] = {0, 0, 0};
    PlacementCost c;
    for (const Unit& u : units_of(mesh)) {
        double m = 0;
        for (auto [q, r] : unit_pairs(u)) {
            const int a = device_of_rank[size_t(q)], b = device_of_rank[size_t(r)];
            m = std::max(m, t[a][b]);
            c.crosses_nodes[u.axis] |= links.node[size_t(a)] != links.node[size_t(b)];
        }
        axis_max[u.axis] = std::max(axis_max[u.axis], m);
        c.spread_s += axis_bytes(bytes, u.axis) * m;
    }
    for (int a = 0; a < 3; ++a) c.gbps[a] = axis_max[a] > 0 ? 1.0 / axis_max[a] / 1e9 : 0;
    c.tp_s = bytes.tp * axis_max[0];
    c.dp_s = bytes.dp * axis_max[1];
    c.pp_s = bytes.pp * axis_max[2];
    c.cost_s = c.tp_s + c.dp_s + c.pp_s;
    return c;
}

}  // namespace

PlacementCost placement_cost(const MeshShape& mesh, const DeviceLinks& links,
                             const AxisBytes& bytes, const std::vector<int>& device_of_rank) {
    ETE_CHECK(int(device_of_rank.size()) == mesh.size(), "placement: {} devices given for {} ranks",
              device_of_rank.size(), mesh.size());
    return cost_on(mesh, links, seconds_per_byte(links), bytes, device_of_rank);
}

std::vector<int> linear_placement(const MeshShape& mesh, const MeshAxis order[3]) {
    auto dim = [&](MeshAxis a) {
        return a == MeshAxis::Tp ? mesh.tp : a == MeshAxis::Dp ? mesh.dp : mesh.pp;
    };
    auto coord = [](const MeshCoord& c, MeshAxis a) {
        return a == MeshAxis::Tp ? c.tp : a == MeshAxis::Dp ? c.dp : c.pp;
    };
    std::vector<int> out(size_t(mesh.size()));
    for (int r = 0; r < mesh.size(); ++r) {
        const MeshCoord c = mesh_coord(mesh, r);
        out[size_t(r)] = (coord(c, order[2]) * dim(order[1]) + coord(c, order[1])) * dim(order[0]) +
                         coord(c, order[0]);
    }
    return out;
}

Placement place_ranks(const MeshShape& mesh, const DeviceLinks& links, const AxisBytes& bytes,
                      int64_t budget) {
    ETE_CHECK(mesh.size() <= links.size(),
              "placement: the mesh dp {} x tp {} x pp {} has {} ranks but there are {} devices",
              mesh.dp, mesh.tp, mesh.pp, mesh.size(), links.size());
    for (int d = 1; d < links.size(); ++d)
        ETE_CHECK(links.node[d] == links.node[d - 1] || links.node[d] == links.node[d - 1] + 1,
                  "placement: device {} is on node {} after node {} (expected each node's "
                  "devices together, nodes in order)",
                  d, links.node[d], links.node[d - 1]);
    const std::vector<std::vector<double>> t = seconds_per_byte(links);
    Search s(mesh, links, t, bytes, budget);
    std::vector<int> best;
    PlacementCost best_cost;
    const MeshAxis T = MeshAxis::Tp, D = MeshAxis::Dp, P = MeshAxis::Pp;
    const MeshAxis orders[6][3] = {{T, D, P}, {T, P, D}, {D, T, P},
                                   {D, P, T}, {P, T, D}, {P, D, T}};
    for (const auto& o : orders) {
        std::vector<int> p = linear_placement(mesh, o);
        const PlacementCost c = cost_on(mesh, links, t, bytes, p);
        if (best.empty() || better(c.cost_s, c.spread_s, best_cost)) best = p, best_cost = c;
    }
    Placement p = s.run(best, best_cost);
    const PlacementCost links_of = cost_on(mesh, links, t, bytes, p.device_of_rank);
    std::copy(std::begin(links_of.gbps), std::end(links_of.gbps), std::begin(p.cost.gbps));
    std::copy(std::begin(links_of.crosses_nodes), std::end(links_of.crosses_nodes),
              std::begin(p.cost.crosses_nodes));
    return p;
}

std::string describe_placement(const MeshShape& mesh, const DeviceLinks& links,
                               const std::vector<int>& device_of_rank) {
    const std::vector<std::vector<double>> t = seconds_per_byte(links);
    const char* axis_name[3] = {"tp", "dp", "pp"};
    std::map<std::string, int> count[3];
    for (const Unit& u : units_of(mesh)) {
        double m = -1;
        std::string cls;
        for (auto [q, r] : unit_pairs(u)) {
            const int a = device_of_rank[size_t(q)], b = device_of_rank[size_t(r)];
            if (t[a][b] > m) {
                m = t[a][b];
                cls = links.name.empty() ? fmt::format("{:.0f} GB/s", links.gbps[a][b])
                                         : links.name[a][b];
            }
        }
        ++count[u.axis][cls];
    }
    std::string out;
    for (int a = 0; a < 3; ++a) {
        if (count[a].empty()) continue;
        std::string part;
        for (const auto& [cls, k] : count[a])
            part += fmt::format("{}{} {}{} on {}", part.empty() ? "" : ", ", k,
                                a == 2 ? "chain" : "group", k == 1 ? "" : "s", cls);
        out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", axis_name[a], part);
    }
    return out.empty() ? "one rank: no links" : out;
}

}  // namespace ete
