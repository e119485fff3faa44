// The string helpers every layer shares. One copy here instead of a private one per file: two
// same-named functions in anonymous namespaces collide when a unity build compiles their files
// as one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dl {

// Spaces, tabs and line ends: what trim() strips unless given another set.
inline constexpr std::string_view kWhitespace = " \t\r\n";
// Spaces and tabs (std::isblank's set): the padding of a CSV cell, whose line ends are its record's.
inline constexpr std::string_view kBlank = " \t";
// What std::isspace accepts in the C locale (and `>>` skips): kWhitespace, vertical tab, form feed.
inline constexpr std::string_view kIsSpace = " \t\n\v\f\r";

// s without its leading and trailing characters from `chars`.
std::string trim(std::string_view s, std::string_view chars = kWhitespace);

// ASCII letters lowered (raised); every other byte, UTF-8 included, as it is.
std::string to_lower(std::string_view s);
std::string to_upper(std::string_view s);

// Only s's ASCII letters and digits, lowered, for names compared loosely: "H100 (80 GB)" -> "h10080gb".
std::string lower_alnum(std::string_view s);

// The parts with `sep` between each two. A tail of a vector v: join(std::span(v).subspan(k), sep).
std::string join(std::span<const std::string> parts, std::string_view sep);

// v as 8 lowercase hex digits: "0000abcd" (CRC-32C values as files and tables show them).
std::string hex32(uint32_t v);

// s with each control byte but line feed and tab (C0, DEL) written as \xNN: text from a file that
// reaches a terminal (an error quoting a config value, a table cell, a log line) cannot move the
// cursor, recolor or retitle it. Other bytes, UTF-8 included, as they are.
std::string printable(std::string_view s);

// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("chek" -> "check" 1).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `name` within a few edits (a third of its length, 1 to 3), for a
// "did you mean"; nullopt when none is that close.
std::optional<std::string> closest_name(std::string_view name, std::span<const std::string> candidates);

// The words of s between runs of kIsSpace, as `>>` reads them: " a b\tc\n" -> {"a", "b", "c"}.
std::vector<std::string> split_words(std::string_view s);

}  // namespace dl
