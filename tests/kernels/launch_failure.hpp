// What the emulator's tests share: the message a failing launch throws.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>

namespace dl::test {

// The message of the std::runtime_error `fn` throws ("" when it throws none).
inline std::string failure(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}
inline bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace dl::test
