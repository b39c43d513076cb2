// The --json form of the tool's output: one JSON document, written as it is built. The
// writer puts the commas and nothing else: callers nest begin/end calls correctly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace relaybus::cli {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(const std::string& name);
  JsonWriter& value(const std::string& text);
  JsonWriter& value(const char* text) { return value(std::string(text)); }
  // Any integer type (a template, so that an int is not taken for a bool).
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  JsonWriter& value(T number) {
    return integer(static_cast<std::int64_t>(number));
  }
  JsonWriter& value(bool flag);
  JsonWriter& null();
  // A JSON value written as it is: text the store produced as JSON (a jsonb payload).
  JsonWriter& raw(const std::string& json);
  // A string, or null when there is none.
  JsonWriter& value(const std::optional<std::string>& text);

  // The document, with a final newline.
  std::string str() const { return out_ + "\n"; }

 private:
  JsonWriter& integer(std::int64_t number);
  void element();  // a comma before every element of an array or object but the first
  std::string out_;
  std::vector<bool> empty_;  // per open array or object: nothing in it yet
  bool after_key_ = false;
};

}  // namespace relaybus::cli
