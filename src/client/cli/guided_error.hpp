// A runtime error that says what to do about it: main prints the message, then the hint on
// a line of its own ("hint: ..."), and exits 1.
#pragma once

#include <stdexcept>
#include <string>

namespace relaybus::cli {

class GuidedError : public std::runtime_error {
 public:
  GuidedError(const std::string& message, std::string hint)
      : std::runtime_error(message), hint_(std::move(hint)) {}
  const std::string& hint() const noexcept { return hint_; }

 private:
  std::string hint_;
};

}  // namespace relaybus::cli
