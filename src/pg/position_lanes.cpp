#include "position_lanes.hpp"

namespace relaybus::pg {

core::PositionSet position_set(std::uint64_t r, int c) {
  bool null = false;
  const Datum value = row::datum(r, c, &null);
  if (null) return {};
  Datum* elements = nullptr;
  bool* nulls = nullptr;
  int count = 0;
  pg_call([&] {
    ArrayType* array = DatumGetArrayTypeP(value);
    deconstruct_array(array, INT8OID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elements,
                      &nulls, &count);
  });
  std::vector<core::Position> positions;
  positions.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i)
    if (!nulls[i]) positions.push_back(DatumGetInt64(elements[i]));
  return core::PositionSet(positions.begin(), positions.end());
}

}  // namespace relaybus::pg
