// Result<T>: the error-return type used across module boundaries. No exceptions cross a
// module boundary; an error carries one human-readable message that names the file, the
// offset and the rule that failed.
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>
#include <variant>

namespace ljprof {

struct Error {
  std::string message;
};

template <typename... Args>
Error make_error(fmt::format_string<Args...> format, Args&&... args) {
  return Error{fmt::format(format, std::forward<Args>(args)...)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : state_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(state_); }
  const std::string& message() const { return error().message; }

 private:
  std::variant<T, Error> state_;
};

// Result<void> equivalent.
struct Ok {};
using Status = Result<Ok>;

}  // namespace ljprof

// Propagate an error from an expression returning Result<...> / Status.
#define LJ_TRY(expr)                                         \
  do {                                                       \
    auto lj_try_result_ = (expr);                            \
    if (!lj_try_result_.ok()) return lj_try_result_.error(); \
  } while (0)

// Evaluate a Result, propagate its error, else bind its value to `lhs`.
#define LJ_ASSIGN_OR_RETURN(lhs, expr)                                                   \
  auto LJ_CONCAT_(lj_res_, __LINE__) = (expr);                                           \
  if (!LJ_CONCAT_(lj_res_, __LINE__).ok()) return LJ_CONCAT_(lj_res_, __LINE__).error(); \
  lhs = std::move(LJ_CONCAT_(lj_res_, __LINE__)).value()

#define LJ_CONCAT_INNER_(a, b) a##b
#define LJ_CONCAT_(a, b) LJ_CONCAT_INNER_(a, b)
