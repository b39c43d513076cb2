// Internal to src/mongo (not installed): reading one field of a stored document, for the
// document readers (documents.cpp) and the 0.1.0 upgrade's (upgrade_commands.cpp). A field
// that is missing or of another type than the layout says means the storage was edited by
// hand or is not relaybus's: core::Error kInternal naming the field.
#pragma once

#include <bson/bson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "documents.hpp"

namespace relaybus::mongo::fields {

[[noreturn]] void unreadable(const char* what);

bool has_field(const bson_t* doc, const char* name);
std::string string_field(const bson_t* doc, const char* name);
// Absent or null: nullopt.
std::optional<std::string> string_or_null_field(const bson_t* doc, const char* name);
// An integer written as int32 or int64 (a document edited by hand may hold either).
std::int64_t integer_field(const bson_t* doc, const char* name);
std::vector<std::string> strings_field(const bson_t* doc, const char* name);
std::int32_t to_int32(std::int64_t value, const char* name);
// A date, in milliseconds since the epoch; absent or null: nullopt.
std::optional<std::int64_t> date_or_null_field(const bson_t* doc, const char* name);
std::int64_t date_field(const bson_t* doc, const char* name);
// An embedded document, copied.
Bson document_field(const bson_t* doc, const char* name);

}  // namespace relaybus::mongo::fields
