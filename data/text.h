#pragma once
// Private helpers of the data readers and generators: lines and fields with
// their positions, located errors and whole-file reads (the PRNG is the public
// vjit::Rng, vjit/random.h).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vjit::data {

struct Line {
  int number = 0;  // 1-based
  std::string_view text;
};
// The lines of `text` (without '\n' and a trailing '\r').
std::vector<Line> split_lines(std::string_view text);

struct Field {
  std::string_view text;
  int column = 0;  // 1-based byte column
};
// The runs of non-blank characters of a line (blank: space, tab, '\r').
std::vector<Field> split_fields(std::string_view line);
bool is_blank(char c);
bool is_blank_line(std::string_view line);

// Throws UserError "<source>:<line>:<column>: <what>".
[[noreturn]] void fail_at(const std::string& source, int line, int column, const std::string& what);

// The whole integer `text` in int range, or false.
bool parse_int(std::string_view text, int& value);
// parse_int of a field, or fail_at "<what> must be an integer, got '<text>'".
int field_int(const std::string& source, int line, const Field& field, const char* what);

// The file's bytes, decompressed when it is gzip (by its magic bytes, whatever
// its name); UserError naming `path` (and what it should hold) when it cannot
// be read or its gzip data is corrupt or truncated.
std::string read_text_file(const std::string& path, const char* what);
void write_text_file(const std::string& path, const std::string& text, const char* what);

}  // namespace vjit::data
