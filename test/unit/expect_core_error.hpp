// Shared by the core unit tests: asserts that a call throws core::Error with a given SQLSTATE
// (and not some other exception, and not nothing).
#pragma once

#include "core/error.hpp"

#include <gtest/gtest.h>

#include <exception>
#include <string_view>

namespace relaybus::core::testing {

// The SQLSTATE written out here, not taken from core, so a changed constant fails a test.
inline constexpr const char* kInvalidParameterValue = "22023";

template <typename F>
::testing::AssertionResult ThrowsCoreError(F&& call, std::string_view expected_sqlstate) {
  try {
    call();
  } catch (const Error& e) {
    if (e.sqlstate() != nullptr && std::string_view(e.sqlstate()) == expected_sqlstate)
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "threw core::Error with SQLSTATE " << (e.sqlstate() ? e.sqlstate() : "(null)") << " ("
           << e.what() << "), expected " << expected_sqlstate;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-core exception: " << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "threw something that is not an exception";
  }
  return ::testing::AssertionFailure() << "did not throw";
}

template <typename F>
::testing::AssertionResult ThrowsInvalidParameter(F&& call) {
  return ThrowsCoreError(std::forward<F>(call), kInvalidParameterValue);
}

}  // namespace relaybus::core::testing
