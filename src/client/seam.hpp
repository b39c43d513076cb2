// The runtime speaks the store-neutral seam (src/store/store.hpp); these are its names here.
#pragma once

#include "../store/store.hpp"

namespace relaybus::client {

using store::Delivery;
using store::Event;
using store::FailOutcome;
using store::Store;
using store::StoreError;
using store::StoreFactory;
using store::Transaction;
using store::Worker;

}  // namespace relaybus::client
