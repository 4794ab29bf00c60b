// What the desktop image adds to the system image's Debian (base-image.ts builds it): a display on
// a virtual framebuffer with an XFCE session, Firefox ESR, a terminal and an editor, the X tools a
// computer-use agent drives it with (xdotool, scrot, xrandr, xdpyinfo), and x11vnc with noVNC for
// a live view. All from Debian's archive.
//
// The desktop starts at boot as a systemd service (forgevm-desktop.service, as `user`), and the
// boot waits for it, so the image's base snapshot holds a desktop that is up and a spawn restores
// it running. E2B's desktop SDK starts `Xvfb` and `startxfce4` itself after its create: both are
// wrapped (dpkg-divert) so that a client asking for the screen that runs keeps it, and one asking
// for another size gets a new X server of that size, whose session it then starts.

/** The packages (Debian bookworm's names), installed without their recommendations. */
export const DESKTOP_PACKAGES = [
  "xvfb",
  "x11-utils",
  "x11-xserver-utils",
  "xdotool",
  "scrot",
  "x11vnc",
  "novnc",
  "python3-websockify",
  "net-tools",
  "dbus-x11",
  "xfce4-session",
  "xfwm4",
  "xfce4-panel",
  "xfdesktop4",
  "xfce4-settings",
  "xfce4-terminal",
  "mousepad",
  "firefox-esr",
  "xdg-utils",
  "libgtk-3-bin",
  "fonts-dejavu-core",
  "adwaita-icon-theme",
];

/** The screen a desktop boots with when its spawn does not say: E2B's desktop SDK's defaults. */
export const DEFAULT_SCREEN = { width: 1024, height: 768, dpi: 96 };

/** Where the running desktop's screen is written (by the start script), read by the wrappers. */
const SCREEN_FILE = "/etc/forgevm/desktop.env";

const START = `#!/bin/sh
# Starts the display and the XFCE session on it, and returns once the session's panel is on the
# screen: the boot waits for this service, so a base snapshot made after it holds a ready desktop.
set -u
[ -r ${SCREEN_FILE} ] && . ${SCREEN_FILE}
: "\${WIDTH:=${DEFAULT_SCREEN.width}}" "\${HEIGHT:=${DEFAULT_SCREEN.height}}" "\${DPI:=${DEFAULT_SCREEN.dpi}}"
export DISPLAY=:0
setsid -f /usr/bin/Xvfb.real :0 -ac -screen 0 "\${WIDTH}x\${HEIGHT}x24" -retro -dpi "$DPI" -nolisten tcp -nolisten unix >/tmp/xvfb.log 2>&1
i=0
until xdpyinfo >/dev/null 2>&1; do i=$((i + 1)); [ $i -lt 600 ] || { echo "X did not start" >&2; exit 1; }; sleep 0.1; done
xset s off -dpms
setsid -f /usr/bin/startxfce4.real >/tmp/xfce4.log 2>&1
i=0
until xdotool search --onlyvisible --class xfce4-panel >/dev/null 2>&1; do i=$((i + 1)); [ $i -lt 1200 ] || { echo "the XFCE panel did not appear" >&2; exit 1; }; sleep 0.1; done
`;

const XVFB = `#!/bin/sh
# The desktop runs from boot (forgevm-desktop.service). A client that starts an X server itself, as
# E2B's desktop SDK does on create, keeps the running one when it asks for the same screen, and gets
# a new one of the size it asks for otherwise (the old one's session ends with it).
display=\${1:-}
case "$display" in :[0-9]*) ;; *) exec /usr/bin/Xvfb.real "$@" ;; esac
want=$(printf '%s\\n' "$*" | sed -n 's/.*-screen [0-9][0-9]* \\([0-9][0-9]*x[0-9][0-9]*\\).*/\\1/p')
dpi=$(printf '%s\\n' "$*" | sed -n 's/.*-dpi \\([0-9][0-9]*\\).*/\\1/p')
if info=$(xdpyinfo -display "$display" 2>/dev/null); then
  have=$(printf '%s\\n' "$info" | awk '/dimensions:/ {print $2; exit}')
  havedpi=$(printf '%s\\n' "$info" | awk '/resolution:/ {split($2, r, "x"); print r[1]; exit}')
  [ "$have" = "\${want:-$have}" ] && [ "$havedpi" = "\${dpi:-$havedpi}" ] && exit 0
  pkill -f "^/usr/bin/Xvfb.real $display( |$)"
  i=0
  while xdpyinfo -display "$display" >/dev/null 2>&1 && [ $i -lt 100 ]; do i=$((i + 1)); sleep 0.1; done
  # The old session ends with its X server; it must be gone before the client starts a new one,
  # or startxfce4 would take it for the session that runs.
  sessions() {
    for p in $(pgrep -x xfce4-session); do
      tr '\\0' '\\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "DISPLAY=$display" && echo "$p"
    done
  }
  for p in $(sessions); do kill "$p"; done
  i=0
  while [ -n "$(sessions)" ] && [ $i -lt 50 ]; do i=$((i + 1)); sleep 0.1; done
fi
exec /usr/bin/Xvfb.real "$@"
`;

const STARTXFCE4 = `#!/bin/sh
# The session started at boot (forgevm-desktop.service) is kept when one runs on this display.
d=\${DISPLAY:-:0}
for p in $(pgrep -x xfce4-session); do
  tr '\\0' '\\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "DISPLAY=$d" && exit 0
done
exec /usr/bin/startxfce4.real "$@"
`;

const UNIT = `[Unit]
Description=ForgeVM desktop: X on a virtual framebuffer with an XFCE session
After=dbus.service systemd-user-sessions.service

[Service]
Type=oneshot
RemainAfterExit=yes
User=user
WorkingDirectory=/home/user
# GTK's accessibility bus would make every application wait for a bus nobody runs.
Environment=NO_AT_BRIDGE=1
ExecStart=/usr/local/lib/forgevm-desktop/start
TimeoutStartSec=300

[Install]
WantedBy=multi-user.target
`;

/** Firefox as a sandbox's user meets it: no first-run pages, no update or default-browser checks. */
const FIREFOX_POLICIES = {
  policies: {
    DisableAppUpdate: true,
    DontCheckDefaultBrowser: true,
    DisableTelemetry: true,
    DisableFirefoxStudies: true,
    NoDefaultBookmarks: true,
    OverrideFirstRunPage: "",
    OverridePostUpdatePage: "",
    Homepage: { StartPage: "none" },
    UserMessaging: { WhatsNew: false, ExtensionRecommendations: false, FeatureRecommendations: false, SkipOnboarding: true, MoreFromMozilla: false },
  },
};

/**
 * Firefox's own defaults, for a small VM: one content process and no site isolation (each process
 * is a large program started again, which under TCG takes tens of seconds), no preloaded spare
 * process, and nothing that calls home (safe browsing, telemetry, studies, the new-tab feeds).
 */
const FIREFOX_PREFS = Object.entries({
  "fission.autostart": false,
  "dom.ipc.processCount": 1,
  "dom.ipc.processPrelaunch.enabled": false,
  "extensions.webextensions.remote": false,
  "browser.safebrowsing.malware.enabled": false,
  "browser.safebrowsing.phishing.enabled": false,
  "browser.safebrowsing.downloads.enabled": false,
  "browser.shell.checkDefaultBrowser": false,
  "browser.aboutwelcome.enabled": false,
  "browser.startup.homepage_override.mstone": "ignore",
  "browser.newtabpage.activity-stream.feeds.system.topstories": false,
  "browser.newtabpage.activity-stream.feeds.section.topstories": false,
  "datareporting.policy.dataSubmissionEnabled": false,
  "toolkit.telemetry.enabled": false,
  "app.normandy.enabled": false,
  "extensions.pocket.enabled": false,
})
  .map(([k, v]) => `pref(${JSON.stringify(k)}, ${JSON.stringify(v)});\n`)
  .join("");

/** Files written into the image (paths relative to its root). */
export const DESKTOP_FILES: Record<string, string> = {
  "usr/local/lib/forgevm-desktop/start": START,
  "usr/local/lib/forgevm-desktop/Xvfb": XVFB,
  "usr/local/lib/forgevm-desktop/startxfce4": STARTXFCE4,
  "etc/systemd/system/forgevm-desktop.service": UNIT,
  "usr/lib/firefox-esr/distribution/policies.json": `${JSON.stringify(FIREFOX_POLICIES, null, 2)}\n`,
  "usr/lib/firefox-esr/browser/defaults/preferences/forgevm.js": FIREFOX_PREFS,
  [SCREEN_FILE.slice(1)]: `WIDTH=${DEFAULT_SCREEN.width}\nHEIGHT=${DEFAULT_SCREEN.height}\nDPI=${DEFAULT_SCREEN.dpi}\n`,
};

/**
 * Firefox's first start, made when the image is built (base-image.ts runs this on the host, in
 * namespaces of its own, with the image's root as $1) so that no sandbox makes it: a first start
 * creates the profile (its databases, the add-ons' and search engines' registries) and compiles
 * the browser's scripts into its caches, which under TCG took 30 of the 60 seconds to a first
 * page, and seconds natively. Headless, offline (no network in its namespace), as the sandbox's
 * user; a page closes the only window after the start's delayed work, so Firefox ends as on a quit
 * and writes its caches. What names one profile (its ids, its session, the crash and telemetry
 * directories, the key database) is removed: each sandbox makes its own.
 */
export const DESKTOP_WARM = `set -eu
root=$1
mount -t proc proc "$root/proc"
mount -t tmpfs tmpfs "$root/dev/shm"
pref=$root/usr/lib/firefox-esr/browser/defaults/preferences/forgevm-warm.js
echo 'pref("dom.allow_scripts_to_close_windows", true);' >"$pref"
echo '<title>warm</title><script>setTimeout(() => window.close(), 8000)</script>' >"$root/tmp/forgevm-warm.html"
status=0
timeout 180 chroot --userspec=user:user "$root" env -i HOME=/home/user LANG=C.UTF-8 PATH=/usr/bin:/bin MOZ_CRASHREPORTER_DISABLE=1 MOZ_DISABLE_CONTENT_SANDBOX=1 \
  firefox-esr --headless file:///tmp/forgevm-warm.html >/dev/null 2>&1 || status=$?
rm -f "$pref"
find "$root/tmp" -mindepth 1 -delete
home=$root/home/user
if [ $status -ne 0 ] || ! ls "$home"/.mozilla/firefox/*.default-esr/times.json >/dev/null 2>&1; then
  rm -rf "$home/.mozilla" "$home/.cache/mozilla"
  echo "Firefox's first start failed (status $status)" >&2
  exit 1
fi
cd "$home/.mozilla/firefox"
rm -rf "Crash Reports" "Pending Pings" "Profile Groups"
for p in *.default-esr; do
  (cd "$p" && rm -rf lock .parentlock key4.db sessionstore.jsonlz4 sessionstore-backups sessionCheckpoints.json xulstore.json crashes minidumps datareporting)
  grep -v -E 'contextId|impressionId|nimbus.profileId|cachedUsageProfile|reauth.optout' "$p/prefs.js" >"$p/prefs.js.new" || true
  mv "$p/prefs.js.new" "$p/prefs.js"
  chown --reference="$p/times.json" "$p/prefs.js"
done
`;

/** Run in the image once its packages and files are in (after the user is added). */
export const DESKTOP_AFTER = [
  "chmod 755 /usr/local/lib/forgevm-desktop/*",
  // The real programs move aside; the wrappers take their names.
  ...["Xvfb", "startxfce4"].map(
    (p) => `dpkg-divert --quiet --local --rename --divert /usr/bin/${p}.real --add /usr/bin/${p} && ln -s /usr/local/lib/forgevm-desktop/${p} /usr/bin/${p}`,
  ),
  // The panel's own default layout as the system's, so that no first-start dialog asks for one.
  "mkdir -p /etc/xdg/xfce4/xfconf/xfce-perchannel-xml && cp /etc/xdg/xfce4/panel/default.xml /etc/xdg/xfce4/xfconf/xfce-perchannel-xml/xfce4-panel.xml",
  // Where E2B's desktop SDK runs noVNC from.
  "ln -s /usr/share/novnc /opt/noVNC",
  // The image keeps whole seconds of a file's time, and fontconfig takes a cache whose directory's
  // time differs by a nanosecond for a stale one: each VM would scan every font again at its first
  // start (seconds under TCG). Whole-second times for the font directories (and those their links
  // name), then their caches.
  "t=$(date +%s) && find -L /usr/share/fonts /usr/local/share/fonts -type d -exec touch -m -d @$t {} + && fc-cache -f -s",
  "systemctl enable forgevm-desktop.service",
];
