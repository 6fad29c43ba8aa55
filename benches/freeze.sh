# Sourced by the bench scripts (compare, watch-memory, watch-fanout).
#
# freeze_binaries: copies actcd and actcd-tables into $WORK/bin and runs those, so that a build
# in the shared target dir during a run cannot change the binaries under it (actcd-tables finds
# actcd next to itself). Needs ACTCD, TABLES (paths) and WORK (a temp dir the caller removes).
# Sets BUILD_INFO, ACTCD and TABLES.
freeze_binaries() {
    mkdir -p "$WORK/bin"
    cp "$ACTCD" "$WORK/bin/actcd"
    cp "$TABLES" "$WORK/bin/actcd-tables"
    BUILD_INFO="actcd built $(date -u -r "$ACTCD" '+%Y-%m-%d %H:%M UTC') (sha256 $(sha256sum "$ACTCD" | cut -c1-12)), work tree at $(git describe --always --dirty 2>/dev/null || echo unknown)"
    ACTCD="$WORK/bin/actcd"
    TABLES="$WORK/bin/actcd-tables"
}
