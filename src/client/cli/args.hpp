// Command-line options of the form `--name value` (and bare `--flag`).
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace relaybus::cli {

class Args {
 public:
  // Parses argv[from..]: words before the first option are positional.
  Args(int argc, char** argv, int from);

  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& name) const { return options_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& fallback) const;
  std::string required(const std::string& name) const;
  long long integer(const std::string& name, long long fallback) const;
  double number(const std::string& name, double fallback) const;

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::string> options_;
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace relaybus::cli
