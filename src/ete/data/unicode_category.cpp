// ete/data/unicode_category.cpp — General_Category, White_Space and class ranges (Unicode 16.0).
#include <algorithm>
#include <array>

#include "ete/core/error.h"
#include "ete/data/unicode.h"
#include "ete/data/unicode_tables.h"

namespace ete::unicode {

namespace {

static_assert(static_cast<int>(Category::Cn) + 1 == kCategoryCount);

constexpr std::array<std::string_view, kCategoryCount> kCategoryNames = {
    "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
    "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};

const detail::ClassEntry& class_entry(std::string_view name, const char* what) {
    for (const detail::ClassEntry& e : detail::kClasses) {
        if (e.name == name) return e;
    }
    throw_error(fmt::format(
        "unicode::{}: unknown class '{}' (expected a General_Category such as Lu or Nd, or one "
        "of L, M, N, P, S, Z, C)",
        what, name));
}

std::span<const Range> pool_slice(uint32_t offset, uint32_t count) {
    return {detail::kClassRangePool + offset, count};
}

}  // namespace

std::string_view category_name(Category c) {
    return kCategoryNames[static_cast<size_t>(c)];
}

Category category(char32_t cp) {
    if (cp > detail::kMaxCodePoint) return Category::Cn;
    return static_cast<Category>(detail::two_stage<detail::kCategoryShift>(
        detail::kCategoryIndex, detail::kCategoryData, cp));
}

bool is_white_space(char32_t cp) {
    const auto* end = std::end(detail::kWhiteSpace);
    const auto* it = std::lower_bound(std::begin(detail::kWhiteSpace), end, cp,
                                      [](const Range& r, char32_t c) { return r.last < c; });
    return it != end && it->first <= cp;
}

std::string_view unicode_version() {
    return detail::kUnicodeVersion;
}
std::string_view normalization_version() {
    return detail::kNormalizationVersion;
}
std::string_view lowercase_version() {
    return detail::kLowercaseVersion;
}

std::span<const Range> class_ranges(std::string_view name) {
    const detail::ClassEntry& e = class_entry(name, "class_ranges");
    return pool_slice(e.offset, e.count);
}

std::span<const Range> class_added_since_14(std::string_view name) {
    const detail::ClassEntry& e = class_entry(name, "class_added_since_14");
    return pool_slice(e.added_offset, e.added_count);
}

std::span<const Range> class_removed_since_14(std::string_view name) {
    const detail::ClassEntry& e = class_entry(name, "class_removed_since_14");
    return pool_slice(e.removed_offset, e.removed_count);
}

}  // namespace ete::unicode
