// Shared by the core unit tests: asserts that a call throws core::Error with a given code
// (and not some other exception, and not nothing).
#pragma once

#include "core/error.hpp"

#include <gtest/gtest.h>

#include <exception>

namespace relaybus::core::testing {

template <typename F>
::testing::AssertionResult ThrowsCoreError(F&& call, ErrorCode expected) {
  try {
    call();
  } catch (const Error& e) {
    if (e.code() == expected) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "threw core::Error " << name_of(e.code()) << " ("
                                         << e.what() << "), expected " << name_of(expected);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-core exception: " << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "threw something that is not an exception";
  }
  return ::testing::AssertionFailure() << "did not throw";
}

template <typename F>
::testing::AssertionResult ThrowsInvalidParameter(F&& call) {
  return ThrowsCoreError(std::forward<F>(call), ErrorCode::kInvalidParameter);
}

}  // namespace relaybus::core::testing
