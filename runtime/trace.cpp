#include "runtime/trace.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>

#include "io/atomic_file.h"

namespace vjit::runtime {

namespace {

// A JSON string literal of `text` (quotes, backslashes and control characters escaped).
void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", unsigned(byte));
      out += escaped;
    } else {
      out += c;
    }
  }
  out += '"';
}

// Nanoseconds as the file's microseconds, exactly (three decimals).
void append_microseconds(std::string& out, int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
  out += text;
}

void append_arg(std::string& out, bool& first, const char* key, int64_t value) {
  if (value < 0) return;
  out += first ? "" : ",";
  first = false;
  out += '"';
  out += key;
  out += "\":";
  out += std::to_string(value);
}

}  // namespace

const char* trace_category_name(TraceCategory category) {
  static constexpr std::array<const char*, 9> names{"call", "engine", "task", "gemm", "fused",
                                                    "copy", "kernel", "optimizer", "block"};
  return names[size_t(category)];
}

TraceRecorder::TraceRecorder(std::string path, std::vector<std::string> type_names, size_t max_events)
    : path_(std::move(path)),
      type_names_(std::move(type_names)),
      max_events_(max_events),
      origin_(std::chrono::steady_clock::now()) {
  events_.reserve(std::min<size_t>(max_events_, 4096));
  write();
}

void TraceRecorder::record(std::string_view name, TraceCategory category, int64_t start, const TraceArgs& args) {
  const int64_t end = now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back({name, category, thread_id_locked("vjit pool thread"), start, end - start, args});
}

void TraceRecorder::name_this_thread(std::string_view name) {
  std::lock_guard<std::mutex> lock(mutex_);
  thread_names_[size_t(thread_id_locked(name))] = name;  // named as its role, without a number
}

// Tracks are numbered in the order threads first record: small and stable for a run.
int TraceRecorder::thread_id_locked(std::string_view default_name) {
  auto [it, inserted] = tids_.try_emplace(std::this_thread::get_id(), int(thread_names_.size()));
  if (inserted) thread_names_.push_back(std::string(default_name) + " " + std::to_string(it->second));
  return it->second;
}

size_t TraceRecorder::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

int64_t TraceRecorder::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

std::string TraceRecorder::json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string pid = std::to_string(::getpid());
  std::string out;
  out.reserve(events_.size() * 160 + 256);
  out += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_events\":" + std::to_string(dropped_) +
         ",\"max_events\":" + std::to_string(max_events_) + "},\"traceEvents\":[";
  bool first_event = true;
  auto begin_event = [&] {
    out += first_event ? "\n" : ",\n";
    first_event = false;
  };
  for (size_t tid = 0; tid < thread_names_.size(); ++tid) {
    begin_event();
    out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid) +
           ",\"args\":{\"name\":";
    append_json_string(out, thread_names_[tid]);
    out += "}}";
  }
  for (const Event& e : events_) {
    const bool typed = e.args.type >= 0 && size_t(e.args.type) < type_names_.size();
    begin_event();
    out += "{\"name\":";
    append_json_string(out, e.name.empty() && typed ? std::string_view(type_names_[size_t(e.args.type)]) : e.name);
    out += ",\"cat\":\"";
    out += trace_category_name(e.category);
    out += "\",\"ph\":\"X\",\"ts\":";
    append_microseconds(out, e.start);
    out += ",\"dur\":";
    append_microseconds(out, e.duration);
    out += ",\"pid\":" + pid + ",\"tid\":" + std::to_string(e.tid) + ",\"args\":{";
    bool first_arg = true;
    if (typed) {
      out += "\"vertex_type\":";
      append_json_string(out, type_names_[size_t(e.args.type)]);
      first_arg = false;
    }
    append_arg(out, first_arg, "task", e.args.task);
    append_arg(out, first_arg, "rows", e.args.rows);
    append_arg(out, first_arg, "cols", e.args.cols);
    append_arg(out, first_arg, "bytes", e.args.bytes);
    append_arg(out, first_arg, "M", e.args.m);
    append_arg(out, first_arg, "N", e.args.n);
    append_arg(out, first_arg, "K", e.args.k);
    append_arg(out, first_arg, "products", e.args.products);
    out += "}}";
  }
  out += "\n]}\n";
  return out;
}

void TraceRecorder::write() const {
  const std::string text = json();
  const std::array<std::string_view, 1> pieces{text};
  io::write_file_atomically(path_, pieces, "VJIT_TRACE file");
}

}  // namespace vjit::runtime
