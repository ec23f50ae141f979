#include "data/text.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <zlib.h>

#include "vjit/error.h"

namespace vjit::data {

namespace {

// gzip files start with these two bytes (RFC 1952).
bool is_gzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// The uncompressed text of gzip `bytes` (every member, as gunzip does);
// UserError naming `path` when they are corrupt or cut short.
std::string gunzip(const std::string& bytes, const std::string& path, const char* what) {
  z_stream stream{};
  VJIT_USER_CHECK(inflateInit2(&stream, 15 + 16) == Z_OK,  // 15 + 16: a gzip wrapper, the largest window
                  "cannot read " << what << " '" << path << "': zlib failed to start");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = uInt(bytes.size());
  std::string text;
  char chunk[1 << 16];
  int status = Z_OK;
  while (true) {
    stream.next_out = reinterpret_cast<Bytef*>(chunk);
    stream.avail_out = sizeof chunk;
    status = inflate(&stream, Z_NO_FLUSH);
    text.append(chunk, sizeof chunk - stream.avail_out);
    if (status == Z_STREAM_END && stream.avail_in > 0 && inflateReset(&stream) == Z_OK) continue;  // next member
    if (status != Z_OK) break;
    if (stream.avail_in == 0 && stream.avail_out > 0) break;  // input used up inside a member
  }
  const std::string message = stream.msg != nullptr ? stream.msg : "";
  inflateEnd(&stream);
  const bool truncated = status == Z_OK || status == Z_BUF_ERROR;  // no error, but the input ended inside a member
  VJIT_USER_CHECK(status == Z_STREAM_END || truncated,
                  "cannot read " << what << " '" << path << "': corrupt gzip data"
                                 << (message.empty() ? "" : " (" + message + ")"));
  VJIT_USER_CHECK(!truncated, "cannot read " << what << " '" << path << "': the gzip data is truncated");
  return text;
}

}  // namespace

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
  std::string bytes = buffer.str();
  return is_gzip(bytes) ? gunzip(bytes, path, what) : bytes;
}

void write_text_file(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  VJIT_USER_CHECK(out.is_open(), "cannot create " << what << " '" << path << "'");
  out << text;
  out.flush();
  VJIT_USER_CHECK(out.good(), "cannot write " << what << " '" << path << "'");
}

}  // namespace vjit::data
