// The Worker's opt-in signal handling (handleSignals): SIGINT or SIGTERM starts a graceful
// stop(). A second signal while that runs gives up on it: our handlers are removed and the
// signal is raised again, so it does what it would have done without us (end the process).
const SIGNALS = ['SIGINT', 'SIGTERM'];

// Returns a function that removes the handlers; call it when the stop is done, so that a
// process with nothing else to do exits.
export function stopOnSignals(stop, log) {
  let stopping = false;
  const onSignal = (signal) => {
    if (stopping) {
      remove();
      process.kill(process.pid, signal);
      return;
    }
    stopping = true;
    log.info(`received ${signal}; stopping (send it again to exit at once)`);
    stop();
  };
  function remove() {
    for (const signal of SIGNALS) process.off(signal, onSignal);
  }
  for (const signal of SIGNALS) process.on(signal, onSignal);
  return remove;
}
