#include "args.hpp"

namespace relaybus::cli {

Args::Args(int argc, char** argv, int from) {
  for (int i = from; i < argc; ++i) {
    std::string word = argv[i];
    if (word.rfind("--", 0) == 0) {
      std::string name = word.substr(2), value = "true";
      auto eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
        value = argv[++i];
      }
      options_[name] = value;
    } else {
      positional_.push_back(word);
    }
  }
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  auto it = options_.find(name);
  return it == options_.end() ? fallback : it->second;
}

std::string Args::required(const std::string& name) const {
  auto it = options_.find(name);
  if (it == options_.end()) throw UsageError("--" + name + " is required");
  return it->second;
}

long long Args::integer(const std::string& name, long long fallback) const {
  auto it = options_.find(name);
  if (it == options_.end()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    throw UsageError("--" + name + " needs a whole number, not " + it->second);
  }
}

double Args::number(const std::string& name, double fallback) const {
  auto it = options_.find(name);
  if (it == options_.end()) return fallback;
  try {
    return std::stod(it->second);
  } catch (const std::exception&) {
    throw UsageError("--" + name + " needs a number, not " + it->second);
  }
}

}  // namespace relaybus::cli
