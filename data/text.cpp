#include "data/text.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "vjit/error.h"

namespace vjit::data {

std::vector<Line> split_lines(std::string_view text) {
  std::vector<Line> lines;
  int number = 1;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back({number++, line});
    start = end + 1;
  }
  return lines;
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

bool is_blank_line(std::string_view line) {
  for (char c : line)
    if (!is_blank(c)) return false;
  return true;
}

std::vector<Field> split_fields(std::string_view line) {
  std::vector<Field> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_blank(line[i])) ++i;
    size_t start = i;
    while (i < line.size() && !is_blank(line[i])) ++i;
    if (i > start) fields.push_back({line.substr(start, i - start), int(start) + 1});
  }
  return fields;
}

void fail_at(const std::string& source, int line, int column, const std::string& what) {
  throw UserError(source + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + what);
}

bool parse_int(std::string_view text, int& value) {
  if (text.empty()) return false;
  const char* begin = text.data();
  if (*begin == '+') ++begin;  // from_chars takes '-' but not '+'
  auto [end, error] = std::from_chars(begin, text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

int field_int(const std::string& source, int line, const Field& field, const char* what) {
  int value = 0;
  if (!parse_int(field.text, value))
    fail_at(source, line, field.column,
            std::string(what) + " must be an integer, got '" + std::string(field.text) + "'");
  return value;
}

std::string read_text_file(const std::string& path, const char* what) {
  VJIT_USER_CHECK(!std::filesystem::is_directory(path),
                  "cannot read " << what << " '" << path << "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  VJIT_USER_CHECK(in.is_open(), "cannot open " << what << " '" << path << "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  VJIT_USER_CHECK(!in.bad(), "cannot read " << what << " '" << path << "'");
  return buffer.str();
}

void write_text_file(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  VJIT_USER_CHECK(out.is_open(), "cannot create " << what << " '" << path << "'");
  out << text;
  out.flush();
  VJIT_USER_CHECK(out.good(), "cannot write " << what << " '" << path << "'");
}

}  // namespace vjit::data
