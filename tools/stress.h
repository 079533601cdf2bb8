// `kv0 stress`: a db_stress-style test of both layers' durability.
//
// The parent runs rounds. In each, a child process (`kv0 stress-child`)
// opens one key-value database and one tracking repository under the
// directory and runs several threads of random operations (puts, deletes,
// range deletes, batches, sync writes, flushes and compactions on the
// database; tracked points that often overwrite earlier steps, parameters,
// run updates, flushes and optimize on the repository), with injected WAL
// and commit failures if asked. After each operation returns, the child
// prints its number. The parent kills the child with SIGKILL at a random
// moment (or lets it close), reopens both stores itself, and checks that
// each thread's data equals what its acknowledged operations produce, with
// or without the one operation that was in flight (or failed) when the
// round ended. Each thread owns its keys and its run, so its operations
// alone decide its expected state.
#pragma once

namespace kv0::tools {

// kv0 stress [--dir DIR] [--duration SECONDS] [--threads N] [--seed N]
//            [--faults]
int Stress(int argc, char** argv);
// The child a round runs (not for direct use).
int StressChild(int argc, char** argv);

}  // namespace kv0::tools
