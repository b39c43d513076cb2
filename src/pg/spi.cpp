#include "spi.hpp"

#include "../core/error.hpp"
#include "../core/interval.hpp"

#include <memory>

namespace relaybus::pg {

SpiConnection::SpiConnection() {
  int rc = 0;
  pg_call([&] { rc = SPI_connect(); });
  if (rc != SPI_OK_CONNECT) throw core::Error(core::ErrorCode::kInternal, "SPI_connect failed");
}

void SpiConnection::finish() {
  finish_current();
}

void SpiConnection::finish_current() {
  pg_call([] { SPI_finish(); });
}

void Params::push(Datum value, bool is_null) {
  values_.push_back(value);
  nulls_.push_back(is_null ? 'n' : ' ');
}

void Params::text(std::string_view value) {
  Datum d = 0;
  pg_call([&] { d = PointerGetDatum(cstring_to_text_with_len(value.data(), value.size())); });
  push(d, false);
}

void Params::text(const std::optional<std::string>& value) {
  if (value) {
    text(std::string_view(*value));
  } else {
    push(0, true);
  }
}

void Params::int2(std::int16_t value) {
  push(Int16GetDatum(value), false);
}
void Params::int4(std::int32_t value) {
  push(Int32GetDatum(value), false);
}
void Params::int8(std::int64_t value) {
  push(Int64GetDatum(value), false);
}
void Params::int8(const std::optional<std::int64_t>& value) {
  push(value ? Int64GetDatum(*value) : 0, !value.has_value());
}
void Params::boolean(bool value) {
  push(BoolGetDatum(value), false);
}
void Params::timestamptz(const std::optional<TimestampTz>& value) {
  push(value ? TimestampTzGetDatum(*value) : 0, !value.has_value());
}
void Params::datum(Datum value, bool is_null) {
  push(value, is_null);
}

void Params::interval_us(std::int64_t microseconds) {
  Interval* interval = nullptr;
  pg_call([&] { interval = static_cast<Interval*>(palloc0(sizeof(Interval))); });
  interval->time = microseconds;
  push(IntervalPGetDatum(interval), false);
}

namespace {

// Builds a one-dimensional array of by-value elements (or of already built datums), NULL
// where `nulls` (if given) says so.
Datum build_array(Datum* elements, int count, Oid element_type, bool* nulls = nullptr) {
  Datum result = 0;
  pg_call([&] {
    int16 length;
    bool by_value;
    char align;
    get_typlenbyvalalign(element_type, &length, &by_value, &align);
    int dims[1] = {count};
    int lower[1] = {1};
    result = PointerGetDatum(
        construct_md_array(elements, nulls, 1, dims, lower, element_type, length, by_value, align));
  });
  return result;
}

template <typename T, typename ToDatum>
Datum scalar_array(const std::vector<T>& values, Oid element_type, ToDatum to_datum) {
  std::vector<Datum> elements;
  elements.reserve(values.size());
  for (const T& v : values) elements.push_back(to_datum(v));
  return build_array(elements.data(), static_cast<int>(elements.size()), element_type);
}

}  // namespace

void Params::text_array(const std::vector<std::string>& values) {
  std::vector<Datum> elements(values.size());
  Datum* out = elements.data();
  const std::string* in = values.data();
  const std::size_t n = values.size();
  pg_call([&] {
    for (std::size_t i = 0; i < n; ++i)
      out[i] = PointerGetDatum(cstring_to_text_with_len(in[i].data(), in[i].size()));
  });
  push(build_array(elements.data(), static_cast<int>(n), TEXTOID), false);
}

void Params::text_array(const std::optional<std::vector<std::string>>& values) {
  if (values) {
    text_array(*values);
  } else {
    push(0, true);
  }
}

void Params::int2_array(const std::vector<std::int16_t>& values) {
  push(scalar_array(values, INT2OID, [](std::int16_t v) { return Int16GetDatum(v); }), false);
}
void Params::int4_array(const std::vector<std::int32_t>& values) {
  push(scalar_array(values, INT4OID, [](std::int32_t v) { return Int32GetDatum(v); }), false);
}
void Params::int8_array(const std::vector<std::int64_t>& values) {
  push(scalar_array(values, INT8OID, [](std::int64_t v) { return Int64GetDatum(v); }), false);
}
void Params::bool_array(const std::vector<bool>& values) {
  push(scalar_array(values, BOOLOID, [](bool v) { return BoolGetDatum(v); }), false);
}

void Params::datum_array(const std::vector<Datum>& values, const std::vector<bool>& nulls,
                         Oid element_type) {
  if (nulls.size() != values.size())
    throw core::Error(core::ErrorCode::kInternal, "relaybus: array and null flags differ in size");
  std::vector<Datum> elements(values);
  std::unique_ptr<bool[]> flags(new bool[values.size() + 1]);
  for (std::size_t i = 0; i < nulls.size(); ++i) flags[i] = nulls[i];
  push(build_array(elements.data(), static_cast<int>(elements.size()), element_type, flags.get()),
       false);
}

Statement::Statement(const char* sql, std::initializer_list<Oid> argument_types, Planning planning)
    : sql_(sql), types_(argument_types), planning_(planning) {}

std::uint64_t Statement::run(Params& params) {
  if (params.size() != types_.size())
    throw core::Error(core::ErrorCode::kInternal, "relaybus: statement parameter count mismatch");
  plan();
  int rc = 0;
  std::uint64_t processed = 0;
  pg_call([&] {
    rc = SPI_execute_plan(plan_, params.values(), params.nulls(), false, 0);
    processed = SPI_processed;
  });
  if (rc < 0) throw core::Error(core::ErrorCode::kInternal, "relaybus: SPI_execute_plan failed");
  return processed;
}

SPIPlanPtr Statement::plan() {
  if (plan_ == nullptr) {
    SPIPlanPtr prepared = nullptr;
    // Generic: under the default plan_cache_mode the plan cache keeps re-planning a
    // statement whose custom plans look cheaper than its generic one, and planning was
    // half of an empty claim's time. The delivery path's functions allow only index plans
    // (see sql/parts/api-0.2.0.sql), so its generic plans are right at any table size.
    const int options =
        planning_ == Planning::kGeneric ? CURSOR_OPT_GENERIC_PLAN : CURSOR_OPT_CUSTOM_PLAN;
    pg_call([&] {
      prepared = SPI_prepare_cursor(sql_, static_cast<int>(types_.size()), types_.data(), options);
      if (prepared != nullptr) SPI_keepplan(prepared);
    });
    if (prepared == nullptr)
      throw core::Error(core::ErrorCode::kInternal, "relaybus: could not prepare a statement");
    plan_ = prepared;
  }
  return plan_;
}

std::uint64_t Statement::run() {
  Params none;
  return run(none);
}

namespace row {

Datum datum(std::uint64_t r, int c, bool* is_null) {
  Datum d = 0;
  pg_call([&] { d = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, c, is_null); });
  return d;
}

bool is_null(std::uint64_t r, int c) {
  bool null = false;
  datum(r, c, &null);
  return null;
}

std::optional<std::string> text_or_null(std::uint64_t r, int c) {
  bool null = false;
  Datum d = datum(r, c, &null);
  if (null) return std::nullopt;
  return text_of(d);
}

std::string text(std::uint64_t r, int c) {
  auto value = text_or_null(r, c);
  if (!value) throw core::Error(core::ErrorCode::kInternal, "relaybus: unexpected NULL text");
  return *value;
}

template <typename T, typename FromDatum>
T scalar(std::uint64_t r, int c, FromDatum from) {
  bool null = false;
  Datum d = datum(r, c, &null);
  if (null) throw core::Error(core::ErrorCode::kInternal, "relaybus: unexpected NULL value");
  return from(d);
}

std::int16_t int2(std::uint64_t r, int c) {
  return scalar<std::int16_t>(r, c, [](Datum d) { return DatumGetInt16(d); });
}
std::int32_t int4(std::uint64_t r, int c) {
  return scalar<std::int32_t>(r, c, [](Datum d) { return DatumGetInt32(d); });
}
std::int64_t int8(std::uint64_t r, int c) {
  return scalar<std::int64_t>(r, c, [](Datum d) { return DatumGetInt64(d); });
}
bool boolean(std::uint64_t r, int c) {
  return scalar<bool>(r, c, [](Datum d) { return DatumGetBool(d); });
}

std::vector<std::string> text_array(std::uint64_t r, int c) {
  bool null = false;
  Datum d = datum(r, c, &null);
  if (null) return {};
  return text_array_of(d, "array");
}

std::optional<std::int64_t> stored_interval_us(std::uint64_t r, int c) {
  bool null = false;
  const Datum d = datum(r, c, &null);
  if (null) return std::nullopt;
  return stored_interval_us_of(d);
}

}  // namespace row

std::string text_of(Datum value) {
  text* t = nullptr;
  pg_call([&] {
    t = pg_detoast_datum_packed(reinterpret_cast<struct varlena*>(DatumGetPointer(value)));
  });
  return std::string(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

std::vector<std::string> text_array_of(Datum value, const char* what) {
  Datum* elements = nullptr;
  bool* nulls = nullptr;
  int count = 0;
  int dims = 0;
  pg_call([&] {
    ArrayType* array = DatumGetArrayTypeP(value);
    dims = ARR_NDIM(array);
    deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elements, &nulls, &count);
  });
  if (dims > 1)
    throw core::Error(core::ErrorCode::kInvalidParameter,
                      std::string(what) + " must be a one-dimensional array");
  std::vector<std::string> out;
  out.reserve(count);
  for (int i = 0; i < count; ++i) {
    if (nulls[i])
      throw core::Error(core::ErrorCode::kNullValue, std::string(what) + " must not contain NULL");
    const struct varlena* t = reinterpret_cast<const struct varlena*>(DatumGetPointer(elements[i]));
    out.emplace_back(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
  }
  return out;
}

namespace {

core::IntervalParts parts_of(Datum value) {
  const Interval* interval = nullptr;
  pg_call([&] { interval = DatumGetIntervalP(value); });
  core::IntervalParts parts;
  parts.months = interval->month;
  parts.days = interval->day;
  parts.micros = interval->time;
  return parts;
}

}  // namespace

std::int64_t interval_us_of(Datum value, const char* what) {
  return core::interval_us(parts_of(value), what);
}

std::int64_t stored_interval_us_of(Datum value) {
  return core::interval_us_saturated(parts_of(value));
}

}  // namespace relaybus::pg
