/// @file error.hpp
/// @brief Error codes, the non-throwing `result<T>` and the throwing convenience layer.
///
/// Low-level calls return `result<T>` and never throw. Convenience overloads (those that allocate
/// their output) and constructors throw `gradcomp::error`, which carries the same `errc`.
#pragma once

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace gradcomp {

/**
 * @brief Every failure gradcomp reports. Numbers are stable and grouped in ranges of 100 so that
 * later codes slot in without renumbering: 1xx caller arguments, 2xx data content, 3xx wire
 * format, 4xx compressor state.
 */
enum class errc : std::uint16_t {
  ok = 0,                      ///< No error.
  invalid_argument = 100,      ///< A parameter is outside its documented domain.
  size_mismatch = 101,         ///< Two buffers that must have the same length do not.
  output_too_small = 102,      ///< The output buffer cannot hold the result.
  workspace_too_small = 103,   ///< The workspace is smaller than `workspace_bytes(...)` said.
  size_overflow = 104,         ///< A length exceeds what the index type or `size_t` can hold.
  k_exceeds_n = 105,           ///< More elements were asked for than the input holds.
  index_out_of_range = 106,    ///< An index is not below the length of the tensor it addresses.
  nan_input = 200,             ///< The input holds a NaN, which has no magnitude order.
  non_finite_input = 201,      ///< A gradient holds NaN or an infinity; state was not modified.
  value_out_of_range = 202,    ///< A finite value does not fit the chosen value coding (fp16 above 65504).
  state_overflow = 203,        ///< Finite inputs would overflow a compressor's or aggregator's state
                               ///< to infinity; nothing was modified.
  bad_magic = 300,             ///< The buffer does not start with the message magic "GCWF".
  unsupported_version = 301,   ///< The message's format version is newer than this decoder.
  truncated = 302,             ///< The buffer ends inside the header, a section or the checksum.
  trailing_bytes = 303,        ///< The buffer is longer than the message's declared length.
  kept_exceeds_numel = 304,    ///< A section keeps more elements than its tensor has.
  indices_not_increasing = 305,  ///< Indices repeat or go backwards.
  unknown_coding = 306,        ///< An index coding, value coding, kind or role this decoder lacks.
  checksum_mismatch = 307,     ///< The CRC-32C does not match the message bytes.
  reserved_field = 308,        ///< A reserved field or flag bit is not zero.
  malformed_payload = 309,     ///< A payload's size or content disagrees with its coding.
  layout_mismatch = 310,       ///< A message's tensors disagree with the receiver's tensors.
  section_not_allowed = 311,   ///< A section the message's kind does not allow where it stands
                               ///< (a role, coding or position outside the kind's rules).
  unknown_tensor = 400,        ///< A tensor id or name that was never registered.
  duplicate_tensor = 401,      ///< A tensor name registered twice, or a tensor carried twice by
                               ///< one message.
  wrong_tensor_count = 402,    ///< A step got a different number of tensors than registered.
  missing_tensor = 403,        ///< A message lacks a section for a tensor the receiver expects.
  config_mismatch = 404,       ///< A snapshot was taken with a configuration that differs from
                               ///< the receiving object's (the error's detail names the field).
  device_error = 500,          ///< A call on a device failed and the device stays usable (out of
                               ///< device memory, no device, an invalid launch).
  device_fault = 501,          ///< The device's context is lost (an illegal address, a trap, an
                               ///< uncorrectable ECC error): every later call on it fails until the
                               ///< process restarts.
  resource_unavailable = 502,  ///< The system refused a resource a step needs (a worker thread of
                               ///< a compressor's `threads`); nothing was modified.
  peer_failed = 600,           ///< Another rank of an exchange had no message for the step (its
                               ///< step was refused or its message too large).
  comm_error = 601,            ///< The communication library (MPI, NCCL) or the CUDA runtime under it
                               ///< reported an error.
};

/// Returns the enumerator's name (`"k_exceeds_n"`), or `"unknown"` for a value outside the enum.
constexpr const char* to_string(errc e) noexcept {
  switch (e) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid_argument";
    case errc::size_mismatch: return "size_mismatch";
    case errc::output_too_small: return "output_too_small";
    case errc::workspace_too_small: return "workspace_too_small";
    case errc::size_overflow: return "size_overflow";
    case errc::k_exceeds_n: return "k_exceeds_n";
    case errc::index_out_of_range: return "index_out_of_range";
    case errc::nan_input: return "nan_input";
    case errc::non_finite_input: return "non_finite_input";
    case errc::value_out_of_range: return "value_out_of_range";
    case errc::state_overflow: return "state_overflow";
    case errc::bad_magic: return "bad_magic";
    case errc::unsupported_version: return "unsupported_version";
    case errc::truncated: return "truncated";
    case errc::trailing_bytes: return "trailing_bytes";
    case errc::kept_exceeds_numel: return "kept_exceeds_numel";
    case errc::indices_not_increasing: return "indices_not_increasing";
    case errc::unknown_coding: return "unknown_coding";
    case errc::checksum_mismatch: return "checksum_mismatch";
    case errc::reserved_field: return "reserved_field";
    case errc::malformed_payload: return "malformed_payload";
    case errc::layout_mismatch: return "layout_mismatch";
    case errc::section_not_allowed: return "section_not_allowed";
    case errc::unknown_tensor: return "unknown_tensor";
    case errc::duplicate_tensor: return "duplicate_tensor";
    case errc::wrong_tensor_count: return "wrong_tensor_count";
    case errc::missing_tensor: return "missing_tensor";
    case errc::config_mismatch: return "config_mismatch";
    case errc::device_error: return "device_error";
    case errc::device_fault: return "device_fault";
    case errc::resource_unavailable: return "resource_unavailable";
    case errc::peer_failed: return "peer_failed";
    case errc::comm_error: return "comm_error";
  }
  return "unknown";
}

/// The exception thrown by the convenience layer; `code()` gives the `errc`.
class error : public std::runtime_error {
 public:
  /// Builds an error whose message is `"gradcomp: <name>: <what>"`.
  explicit error(errc code, const std::string& what = {})
      : std::runtime_error(std::string("gradcomp: ") + to_string(code) +
                           (what.empty() ? std::string() : ": " + what)),
        code_(code) {}
  /// The error code.
  errc code() const noexcept { return code_; }

 private:
  errc code_;
};

/// Tag type to build a failed `result` (as `std::unexpected`).
struct unexpected {
  errc code;                       ///< The error carried.
  const char* detail = nullptr;  ///< Optional static text that narrows it (a field's name).
};

/**
 * @brief A value of type `T` or an `errc`, with member names as in `std::expected`.
 *
 * `value()` throws `gradcomp::error` when the result holds an error; `operator*` does not check.
 */
template <class T>
class [[nodiscard]] result {
  static_assert(!std::is_reference<T>::value, "result<T&> is not supported");

 public:
  /// A successful result holding `v`.
  result(T v) noexcept(std::is_nothrow_move_constructible<T>::value)  // NOLINT implicit
      : value_(std::move(v)), code_(errc::ok) {}
  /// A failed result.
  result(unexpected u) noexcept : value_(), code_(u.code), detail_(u.detail) {}  // NOLINT implicit

  /// True when a value is held.
  bool has_value() const noexcept { return code_ == errc::ok; }
  /// True when a value is held.
  explicit operator bool() const noexcept { return has_value(); }
  /// The error code; `errc::ok` when a value is held.
  errc error() const noexcept { return code_; }
  /// What narrows the error (for `errc::config_mismatch`, the field's name); `""` if nothing.
  const char* detail() const noexcept { return detail_ != nullptr ? detail_ : ""; }
  /// The value; throws `gradcomp::error` (with the detail) if the result holds an error.
  const T& value() const& {
    if (!has_value()) throw gradcomp::error(code_, detail());
    return value_;
  }
  /// The value; throws `gradcomp::error` (with the detail) if the result holds an error.
  T& value() & {
    if (!has_value()) throw gradcomp::error(code_, detail());
    return value_;
  }
  /// The value, unchecked.
  const T& operator*() const noexcept { return value_; }
  /// The value, unchecked.
  T& operator*() noexcept { return value_; }
  /// Member access to the value, unchecked.
  const T* operator->() const noexcept { return &value_; }
  /// Member access to the value, unchecked.
  T* operator->() noexcept { return &value_; }
  /// The value, or `fallback` on error.
  T value_or(T fallback) const { return has_value() ? value_ : fallback; }

 private:
  T value_;
  errc code_;
  const char* detail_ = nullptr;
};

/// `result<void>`: success or an `errc`.
template <>
class [[nodiscard]] result<void> {
 public:
  /// A successful result.
  result() noexcept : code_(errc::ok) {}
  /// A failed result.
  result(unexpected u) noexcept : code_(u.code), detail_(u.detail) {}  // NOLINT implicit
  /// True on success.
  bool has_value() const noexcept { return code_ == errc::ok; }
  /// True on success.
  explicit operator bool() const noexcept { return has_value(); }
  /// The error code; `errc::ok` on success.
  errc error() const noexcept { return code_; }
  /// What narrows the error (for `errc::config_mismatch`, the field's name); `""` if nothing.
  const char* detail() const noexcept { return detail_ != nullptr ? detail_ : ""; }
  /// Throws `gradcomp::error` (with the detail) if the result holds an error.
  void value() const {
    if (!has_value()) throw gradcomp::error(code_, detail());
  }

 private:
  errc code_;
  const char* detail_ = nullptr;
};

/// Builds a failed result: `return fail(errc::size_mismatch);`. `detail`, when given, must be a
/// string with static storage (a field's name); `result::detail()` returns it.
constexpr unexpected fail(errc code, const char* detail = nullptr) noexcept {
  return unexpected{code, detail};
}

}  // namespace gradcomp
