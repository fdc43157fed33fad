# Sourced by the recipes of examples/pools/: the names their machines are given, made from
# gpufleet's, and how a pool's list finds its own among a cloud's others (docs/capacity.md).

# A machine's name from its worker's (<pool>-<12 hex digits>): gf-<pool>-<tag> in lower case,
# '_' and '.' written '-': what SkyPilot, RunPod, Vast.ai and Kubernetes all take.
gf_name() {
    printf 'gf-%s\n' "$1" | tr 'A-Z_.' 'a-z--'
}

# The names of this pool's machines (GPUFLEET_POOL), as an extended regular expression: the
# tag after the pool's name is hex, so pool "burst" never claims pool "burst-2"'s machines.
gf_pattern() {
    printf '^%s-[0-9a-f]+$\n' "$(gf_name "$GPUFLEET_POOL")"
}
