// Instantiates every case once per available backend, and says once why a registered
// backend does not run.
#include "contract/contract.hpp"

namespace relaybus::contract {
namespace {

std::vector<std::string> names(bool available) {
  std::vector<std::string> out;
  for (const auto& b : backends())
    if (b.unavailable().empty() == available) out.push_back(b.name);
  return out;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

INSTANTIATE_TEST_SUITE_P(Backends, Contract, ::testing::ValuesIn(names(true)), param_name);
// No backend available (none registered, or none configured): nothing to instantiate.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Contract);

// One skipped test per backend that cannot run here, with the reason.
class Unavailable : public ::testing::TestWithParam<std::string> {};
TEST_P(Unavailable, Backend) {
  GTEST_SKIP() << "contract backend " << GetParam()
               << " skipped: " << backend_named(GetParam()).unavailable();
}
INSTANTIATE_TEST_SUITE_P(Backends, Unavailable, ::testing::ValuesIn(names(false)), param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Unavailable);

}  // namespace
}  // namespace relaybus::contract
