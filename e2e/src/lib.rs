//! End-to-end scenarios across Sluice's parts live in `tests/` (a real API server in
//! process with the DNS server and real DNS clients); `bench/` holds the benchmark
//! scripts that run the release binary beside its peers. Nothing here ships.
