// SPI access for relaybus: statements prepared once per backend and kept (SPI_keepplan),
// parameters built from C++ values, results read back into C++ values. Every PostgreSQL
// call goes through pg_call, so an error becomes a PgError exception.
#pragma once

#include "guard.hpp"

#include <initializer_list>

namespace relaybus::pg {

// Connects to SPI on construction. finish() on the success path; on an error the
// transaction abort cleans SPI up, so there is no destructor doing it.
class SpiConnection {
 public:
  SpiConnection();
  void finish();
  // Finishes the connection made by an earlier SpiConnection (used across a worker's
  // begin/commit of a transaction).
  static void finish_current();
};

class Params {
 public:
  void text(std::string_view value);
  void text(const std::string& value) { text(std::string_view(value)); }
  void text(const char* value) { text(std::string_view(value)); }
  void text(const std::optional<std::string>& value);
  void int2(std::int16_t value);
  void int4(std::int32_t value);
  void int8(std::int64_t value);
  void int8(const std::optional<std::int64_t>& value);
  void boolean(bool value);
  void timestamptz(const std::optional<TimestampTz>& value);
  void interval_us(std::int64_t microseconds);
  void datum(Datum value, bool is_null);
  void text_array(const std::vector<std::string>& values);
  void text_array(const std::optional<std::vector<std::string>>& values);
  void int2_array(const std::vector<std::int16_t>& values);
  void int4_array(const std::vector<std::int32_t>& values);
  void int8_array(const std::vector<std::int64_t>& values);
  void bool_array(const std::vector<bool>& values);
  // A one-dimensional array of `element_type` from datums already built (in the current
  // memory context), NULL where `nulls` says so.
  void datum_array(const std::vector<Datum>& values, const std::vector<bool>& nulls,
                   Oid element_type);

  Datum* values() { return values_.data(); }
  const char* nulls() const { return nulls_.c_str(); }
  std::size_t size() const { return values_.size(); }

 private:
  void push(Datum value, bool is_null);
  std::vector<Datum> values_;
  std::string nulls_;
};

// How a kept statement is planned.
enum class Planning {
  // One generic plan, made on first use and kept until an invalidation (DDL, VACUUM,
  // ANALYZE). For the delivery path, whose functions allow only index plans: no planning
  // per call.
  kGeneric,
  // A plan per call, for the values of that call: for statements outside the delivery
  // path (retention), whose best plan depends on the cutoff and on the statistics.
  kPerCall,
};

// One SQL statement, prepared on first use in a backend and kept for its lifetime.
// Declare as a function-local static next to the code that runs it.
class Statement {
 public:
  Statement(const char* sql, std::initializer_list<Oid> argument_types,
            Planning planning = Planning::kGeneric);
  // Runs the statement; returns the number of rows it returned or processed.
  std::uint64_t run(Params& params);
  std::uint64_t run();  // for statements without parameters
  // The kept plan, prepared if needed: for code that must run it under its own PG_TRY.
  SPIPlanPtr plan();

 private:
  const char* sql_;
  std::vector<Oid> types_;
  Planning planning_;
  SPIPlanPtr plan_ = nullptr;
};

// Reads the result of the last statement run (SPI_tuptable). Columns count from 1.
namespace row {
bool is_null(std::uint64_t r, int c);
Datum datum(std::uint64_t r, int c, bool* is_null);
std::string text(std::uint64_t r, int c);
std::optional<std::string> text_or_null(std::uint64_t r, int c);
std::int16_t int2(std::uint64_t r, int c);
std::int32_t int4(std::uint64_t r, int c);
std::int64_t int8(std::uint64_t r, int c);
bool boolean(std::uint64_t r, int c);
std::vector<std::string> text_array(std::uint64_t r, int c);
// A stored interval in microseconds, saturated instead of overflowing (see
// stored_interval_us_of); nullopt for NULL. Never raises for a value out of range.
std::optional<std::int64_t> stored_interval_us(std::uint64_t r, int c);
}  // namespace row

// Conversions of SQL argument values, for the entry points.
std::string text_of(Datum value);
std::vector<std::string> text_array_of(Datum value, const char* what);
// The one conversion of an interval argument: 30-day months, 24-hour days, checked
// (core::interval_us); 22023 "<what> is out of range" when it does not fit in 64 bits.
std::int64_t interval_us_of(Datum value, const char* what);
// The same for an interval read back from a table: saturated, never an error. Callers
// clamp the result to the value's bounds.
std::int64_t stored_interval_us_of(Datum value);

}  // namespace relaybus::pg
