#include "field_readers.hpp"

#include "core/error.hpp"

namespace relaybus::mongo::fields {

[[noreturn]] void unreadable(const char* what) {
  throw core::Error(core::ErrorCode::kInternal,
                    std::string("relaybus MongoDB store: unreadable document: ") + what);
}

std::string string_field(const bson_t* doc, const char* name) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, doc, name) || !BSON_ITER_HOLDS_UTF8(&it)) unreadable(name);
  std::uint32_t length = 0;
  const char* text = bson_iter_utf8(&it, &length);
  return std::string(text, length);
}

std::optional<std::string> string_or_null_field(const bson_t* doc, const char* name) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, doc, name) || BSON_ITER_HOLDS_NULL(&it)) return std::nullopt;
  if (!BSON_ITER_HOLDS_UTF8(&it)) unreadable(name);
  std::uint32_t length = 0;
  const char* text = bson_iter_utf8(&it, &length);
  return std::string(text, length);
}

std::int64_t integer_field(const bson_t* doc, const char* name) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, doc, name) ||
      !(BSON_ITER_HOLDS_INT32(&it) || BSON_ITER_HOLDS_INT64(&it)))
    unreadable(name);
  return bson_iter_as_int64(&it);
}

std::vector<std::string> strings_field(const bson_t* doc, const char* name) {
  bson_iter_t it;
  bson_iter_t element;
  if (!bson_iter_init_find(&it, doc, name) || !BSON_ITER_HOLDS_ARRAY(&it) ||
      !bson_iter_recurse(&it, &element))
    unreadable(name);
  std::vector<std::string> out;
  while (bson_iter_next(&element)) {
    if (!BSON_ITER_HOLDS_UTF8(&element)) unreadable(name);
    std::uint32_t length = 0;
    const char* text = bson_iter_utf8(&element, &length);
    out.emplace_back(text, length);
  }
  return out;
}

std::int32_t to_int32(std::int64_t value, const char* name) {
  if (value < INT32_MIN || value > INT32_MAX) unreadable(name);
  return static_cast<std::int32_t>(value);
}

std::optional<std::int64_t> date_or_null_field(const bson_t* doc, const char* name) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, doc, name) || BSON_ITER_HOLDS_NULL(&it)) return std::nullopt;
  if (!BSON_ITER_HOLDS_DATE_TIME(&it)) unreadable(name);
  return bson_iter_date_time(&it);
}

std::int64_t date_field(const bson_t* doc, const char* name) {
  const auto at = date_or_null_field(doc, name);
  if (!at) unreadable(name);
  return *at;
}

Bson document_field(const bson_t* doc, const char* name) {
  bson_iter_t it;
  if (!bson_iter_init_find(&it, doc, name) || !BSON_ITER_HOLDS_DOCUMENT(&it)) unreadable(name);
  std::uint32_t length = 0;
  const std::uint8_t* data = nullptr;
  bson_iter_document(&it, &length, &data);
  bson_t* copy = bson_new_from_data(data, length);
  if (!copy) unreadable(name);
  return Bson(copy);
}

bool has_field(const bson_t* doc, const char* name) {
  bson_iter_t it;
  return bson_iter_init_find(&it, doc, name);
}

}  // namespace relaybus::mongo::fields
