#!/usr/bin/env bash
# Pack a browser for the GPU machine, which has no network and no Chromium: Debian's
# headless shell and chromedriver with every library they load that is not glibc's, the
# files the shell reads beside it, one font and the MiniWoB++ pages. The device tool carries
# at most 64 MiB a call and the shell alone is 54 MiB compressed, so it comes apart from
# the rest, in .gpuloop/ (gitignored; benches/gpu/build.sh adds the CUDA CLI, guirl.xz):
#
#   .gpuloop/shell.xz       the headless shell (54 MiB)
#   .gpuloop/rest.tar.xz    chromedriver, libraries, data, font, pages (29 MiB)
#
# Carry shell.xz in one call, then rest.tar.xz and guirl.xz in the next while the machine
# is still warm (ignored files it already holds are kept between calls); section 6 of
# benches/gpu/run.sh unpacks them into /tmp/guirl-browser. Needs scripts/setup.sh's
# browser and pages here.
#
#   benches/gpu/browser.sh        # about 4 minutes on 2 cores
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=/usr/lib/chromium
PAGES=${GUIRL_MINIWOB_DIR:-$HOME/.cache/guirl/miniwob/html}
[ -x $SRC/chromium-headless-shell ] && [ -x $SRC/chromedriver ] || { echo "run scripts/setup.sh first" >&2; exit 1; }
[ -d "$PAGES" ] || { echo "no MiniWoB++ pages in $PAGES: run scripts/setup.sh first" >&2; exit 1; }
STAGE=$(mktemp -d); trap 'rm -rf "$STAGE"' EXIT
mkdir -p .gpuloop "$STAGE/lib" "$STAGE/fonts"
cp $SRC/chromedriver "$STAGE/"
# the data files the shell reads beside itself, and the software GL and Vulkan it renders
# with (loaded at run time; without them no page answered a script)
for f in headless_lib_data.pak headless_lib_strings.pak headless_command_resources.pak icudtl.dat \
  snapshot_blob.bin v8_context_snapshot.bin libEGL.so libGLESv2.so libvk_swiftshader.so \
  vk_swiftshader_icd.json libvulkan.so.1; do
  [ -f $SRC/$f ] && cp $SRC/$f "$STAGE/"
done
# Every library either binary loads, glibc's own excepted (the machine's is used: both
# need GLIBC_2.35 at most).
{ ldd $SRC/chromium-headless-shell; ldd $SRC/chromedriver; } | awk '/=> \//{print $3}' | sort -u \
  | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' \
  | while read -r l; do cp -L "$l" "$STAGE/lib/"; done
# NSS opens its crypto modules itself, beside libnss3 (ldd does not list them).
for m in softokn3 freebl3 freeblpriv3 nssckbi; do
  for f in /usr/lib/x86_64-linux-gnu/lib$m.so /usr/lib/x86_64-linux-gnu/lib$m.chk; do
    [ -f "$f" ] && cp -L "$f" "$STAGE/lib/"
  done
done
# One font family, so pages render text, with a fontconfig file naming only it.
FONT=$(fc-match -f '%{file}' 'DejaVu Sans' 2>/dev/null || true)
[ -n "$FONT" ] && cp -L "$FONT" "$STAGE/fonts/"
cat > "$STAGE/fonts/fonts.conf" <<'EOF'
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig><dir prefix="relative">.</dir><cachedir>/tmp/guirl-browser/fontcache</cachedir></fontconfig>
EOF
cp -r "$PAGES" "$STAGE/miniwob-html"
# the shell takes 3 minutes to compress: once per shell
[ .gpuloop/shell.xz -nt $SRC/chromium-headless-shell ] || xz -T2 -9e -c $SRC/chromium-headless-shell > .gpuloop/shell.xz
tar -C "$STAGE" -cf - . | xz -T2 -9 -c > .gpuloop/rest.tar.xz
ls -la .gpuloop/
echo "carry .gpuloop/shell.xz in one call, then .gpuloop/rest.tar.xz and .gpuloop/guirl.xz in the next"
