#!/usr/bin/env bash
# Install the Tandem bundle for the current user (no root, no Python needed):
#
#   packaging/linux/install.sh [DIST_DIR]        (default dist/tandem; `make install-desktop`)
#   packaging/linux/install.sh --uninstall
#
#   $PREFIX/opt/tandem/                            the bundle (a copy of dist/tandem)
#   $PREFIX/bin/tandem                             -> $PREFIX/opt/tandem/tandem (launcher symlink)
#   $PREFIX/share/applications/tandem.desktop      the menu entry (Exec = the absolute path)
#   $PREFIX/share/applications/tandem-url-handler.desktop
#                                                  opens tandem://open_from_hf?model=…&file=… links
#                                                  (x-scheme-handler/tandem; hidden from menus)
#   $PREFIX/share/icons/hicolor/*/apps/tandem.*    icons: SVG + PNG 16..512
#
# PREFIX defaults to ~/.local. DESTDIR (empty by default) stages the files under another root
# while the paths written into them stay $PREFIX/... (as `make install DESTDIR=` does); tests
# use PREFIX=<temp dir>. Your data (models, chats: ~/.local/share/Tandem) is never touched.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PREFIX="${PREFIX:-$HOME/.local}"
PREFIX="${PREFIX%/}"
DESTDIR="${DESTDIR:-}"
DESTDIR="${DESTDIR%/}"
APP_DIR="$PREFIX/opt/tandem"
BIN_DIR="$PREFIX/bin"
APPS_DIR="$PREFIX/share/applications"
ICON_DIR="$PREFIX/share/icons/hicolor"
ICON_SRC="$HERE/icons/hicolor"

refresh_caches() {
    # Only for a live install: menus and icon themes pick the changes up at once.
    [[ -z "$DESTDIR" ]] || return 0
    if command -v update-desktop-database >/dev/null; then
        update-desktop-database -q "$APPS_DIR" 2>/dev/null || true
    fi
    if command -v gtk-update-icon-cache >/dev/null && [[ -f "$ICON_DIR/index.theme" ]]; then
        gtk-update-icon-cache -q -t -f "$ICON_DIR" 2>/dev/null || true
    fi
}

if [[ "${1:-}" == "--uninstall" ]]; then
    rm -rf "$DESTDIR$APP_DIR"
    if [[ -L "$DESTDIR$BIN_DIR/tandem" ]]; then rm -f "$DESTDIR$BIN_DIR/tandem"; fi
    rm -f "$DESTDIR$APPS_DIR/tandem.desktop" "$DESTDIR$APPS_DIR/tandem-url-handler.desktop"
    rm -f "$DESTDIR$ICON_DIR"/*/apps/tandem.png "$DESTDIR$ICON_DIR/scalable/apps/tandem.svg"
    refresh_caches
    echo "Tandem uninstalled from $DESTDIR$PREFIX (your models and chats are kept)"
    exit 0
fi

DIST="${1:-$ROOT/dist/tandem}"
if [[ ! -x "$DIST/tandem" || ! -d "$DIST/_internal" ]]; then
    echo "error: no bundle at $DIST (expected $DIST/tandem and $DIST/_internal); run: make package" >&2
    exit 1
fi
DIST="$(cd "$DIST" && pwd -P)"
case "$DESTDIR$APP_DIR/" in
"$DIST"/*) echo "error: cannot install the bundle into itself ($DESTDIR$APP_DIR)" >&2; exit 1 ;;
esac

# The bundle: copied next to the old one, then swapped in, so a failed copy leaves the old one.
mkdir -p "$DESTDIR$PREFIX/opt"
staging="$DESTDIR$APP_DIR.new.$$"
trap 'rm -rf "$staging"' EXIT
cp -a "$DIST" "$staging"
rm -rf "$DESTDIR$APP_DIR"
mv "$staging" "$DESTDIR$APP_DIR"
trap - EXIT

# The launcher.
mkdir -p "$DESTDIR$BIN_DIR"
ln -sfn "$APP_DIR/tandem" "$DESTDIR$BIN_DIR/tandem"

# The menu entry, pointing at the installed executable (~/.local/bin is not on every
# desktop session's PATH). A path with spaces is quoted as the Desktop Entry spec asks.
exec_path="$APP_DIR/tandem"
if [[ "$exec_path" == *[[:space:]]* ]]; then exec_path="\"$exec_path\""; fi
mkdir -p "$DESTDIR$APPS_DIR"
sed -e "s|^Exec=.*|Exec=$exec_path|" -e "s|^TryExec=.*|TryExec=$APP_DIR/tandem|" \
    "$HERE/tandem.desktop" >"$DESTDIR$APPS_DIR/tandem.desktop"
chmod 644 "$DESTDIR$APPS_DIR/tandem.desktop"
# The tandem:// link handler: the hub's "Use this model" links open the pair doctor's check.
sed -e "s|^Exec=.*|Exec=$exec_path %u|" -e "s|^TryExec=.*|TryExec=$APP_DIR/tandem|" \
    "$HERE/tandem-url-handler.desktop" >"$DESTDIR$APPS_DIR/tandem-url-handler.desktop"
chmod 644 "$DESTDIR$APPS_DIR/tandem-url-handler.desktop"
if [[ -z "$DESTDIR" ]] && command -v xdg-mime >/dev/null; then
    xdg-mime default tandem-url-handler.desktop x-scheme-handler/tandem 2>/dev/null || true
fi

# The icons.
n_icons=0
for src in "$ICON_SRC"/*/apps/tandem.png "$ICON_SRC"/scalable/apps/tandem.svg; do
    size_dir="$(basename "$(dirname "$(dirname "$src")")")"
    mkdir -p "$DESTDIR$ICON_DIR/$size_dir/apps"
    install -m 644 "$src" "$DESTDIR$ICON_DIR/$size_dir/apps/"
    n_icons=$((n_icons + 1))
done

refresh_caches
echo "Tandem installed: $DESTDIR$APP_DIR ($(du -sh "$DESTDIR$APP_DIR" | cut -f1)), launcher $DESTDIR$BIN_DIR/tandem,"
echo "  menu entry $DESTDIR$APPS_DIR/tandem.desktop, $n_icons icons under $DESTDIR$ICON_DIR"
case ":$PATH:" in
*":$BIN_DIR:"*) ;;
*) [[ -n "$DESTDIR" ]] || echo "note: $BIN_DIR is not on your PATH; the menu entry works anyway" ;;
esac
