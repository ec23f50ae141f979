#pragma once
// The message of the UserError that `f` throws, or "(no UserError)".
#include <string>

#include "vjit/error.h"

namespace vjit::test_util {

template <typename F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

}  // namespace vjit::test_util
