#pragma once
// Two kinds of error (Halide's split): a UserError is the caller's mistake (a bad
// graph, shape, file or option) and names the culprit; an InternalError is a
// broken invariant of vjit itself. Both are exceptions the caller can catch.
#include <sstream>
#include <stdexcept>
#include <string>

namespace vjit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UserError : public Error {
 public:
  using Error::Error;
};

class InternalError : public Error {
 public:
  using Error::Error;
};

/// A collective of data-parallel training that did not complete: a rank died,
/// hung past VJIT_DIST_TIMEOUT or failed (vjit/distributed.h, and NCCL's sums
/// on the GPU).
class DistributedError : public UserError {
 public:
  using UserError::UserError;
};

namespace detail {
/// Collects a message with operator<< and converts to std::string.
class Message {
 public:
  template <typename T>
  Message& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }
  std::string str() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace vjit

#define VJIT_USER_CHECK(condition, message)                                           \
  do {                                                                                \
    if (!(condition)) throw ::vjit::UserError((::vjit::detail::Message() << message).str()); \
  } while (0)

#define VJIT_INTERNAL_CHECK(condition, message)                                       \
  do {                                                                                \
    if (!(condition))                                                                 \
      throw ::vjit::InternalError((::vjit::detail::Message() << "internal error: " << message \
                                   << " (" << __FILE__ << ":" << __LINE__ << ")")      \
                                      .str());                                        \
  } while (0)
