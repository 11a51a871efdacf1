// Whether the host's cores are oversubscribed right now, for the queues' spin-or-sleep choice.
#pragma once

namespace neuronrt {

// True while more threads are runnable on this machine than this process may use cores (by more
// than one). Read from /proc/loadavg at most every few milliseconds; false where it cannot be read.
bool cores_contended();

}  // namespace neuronrt
