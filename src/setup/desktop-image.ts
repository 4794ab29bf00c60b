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

import { DEFAULT_SCREEN, MAX_SCREEN, SCREEN_SCRIPT } from "../schemas/desktop.js";
import { GUEST_CA_FILE, GUEST_PROXY_ADDR, GUEST_PROXY_PORT } from "../schemas/guest-egress.js";

/** The packages (Debian bookworm's names), installed without their recommendations. */
export const DESKTOP_PACKAGES = [
  "xvfb",
  "x11-utils",
  "x11-xserver-utils",
  "xdotool",
  "scrot",
  // screen recordings (Ogg Theora): a handful of packages where ffmpeg brings 78
  "recordmydesktop",
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

/** Where the desktop's screen is kept (by the screen script), read at boot. */
const SCREEN_FILE = "/etc/forgevm/desktop.env";

const SCREEN = `#!/bin/sh
# Sets the running display's screen to WIDTH x HEIGHT (within the X server's framebuffer) and, when
# given, its DPI, without restarting anything: the X server switches to a mode of that size (RandR)
# and the session's windows follow; the DPI is what applications read (Xft/DPI in XFCE's settings,
# for the session's user). Kept in ${SCREEN_FILE} for the next boot. Exit 3: larger than the framebuffer.
set -eu
export DISPLAY=\${DISPLAY:-:0}
w=$1 h=$2 dpi=\${3:-}
max=$(xrandr 2>/dev/null | sed -n 's/.*maximum \\([0-9]*\\) x \\([0-9]*\\).*/\\1 \\2/p')
set -- $max
[ "$w" -le "\${1:-0}" ] && [ "$h" -le "\${2:-0}" ] || exit 3
mode="\${w}x\${h}"
xrandr | grep -q "^ *$mode " || { xrandr --newmode "$mode" 0 "$w" 0 0 0 "$h" 0 0 0; xrandr --addmode screen "$mode"; }
xrandr --output screen --mode "$mode"
# The session's settings daemon (xfsettingsd) reads the outputs again on every RandR change, and
# under load it has been seen to put the output back to its preferred mode (the framebuffer's
# size) or to the one before: the size must read right twice, 0.3 s apart, or the mode is set again.
ok=0 i=0
while [ $ok -lt 2 ] && [ $i -lt 20 ]; do
  sleep 0.3; i=$((i + 1))
  if [ "$(xdotool getdisplaygeometry)" = "$w $h" ]; then ok=$((ok + 1)); else ok=0; xrandr --output screen --mode "$mode"; fi
done
[ $ok -ge 2 ] || { echo "the screen did not stay at $mode" >&2; exit 1; }
old=$( [ -r ${SCREEN_FILE} ] && sed -n 's/^DPI=//p' ${SCREEN_FILE} )
if [ -n "$dpi" ] && pid=$(pgrep -o -x xfce4-session); then
  bus=$(tr '\\0' '\\n' <"/proc/$pid/environ" | sed -n 's/^DBUS_SESSION_BUS_ADDRESS=//p')
  as=""
  [ "$(id -u)" = 0 ] && as="runuser -u $(ps -o user= -p "$pid" | tr -d ' ') --"
  $as env DISPLAY="$DISPLAY" DBUS_SESSION_BUS_ADDRESS="$bus" xfconf-query -c xsettings -p /Xft/DPI -n -t int -s "$dpi"
fi
# Only root keeps it: the boot (as the session's user) sets what the file says.
[ "$(id -u)" = 0 ] || exit 0
mkdir -p ${SCREEN_FILE.slice(0, SCREEN_FILE.lastIndexOf("/"))}
printf 'WIDTH=%s\\nHEIGHT=%s\\nDPI=%s\\n' "$w" "$h" "\${dpi:-\${old:-${DEFAULT_SCREEN.dpi}}}" >${SCREEN_FILE}.new && mv ${SCREEN_FILE}.new ${SCREEN_FILE}
`;

const START = `#!/bin/sh
# Starts the display and the XFCE session on it, and returns once the session's panel is on the
# screen: the boot waits for this service, so a base snapshot made after it holds a ready desktop.
set -u
[ -r ${SCREEN_FILE} ] && . ${SCREEN_FILE}
: "\${WIDTH:=${DEFAULT_SCREEN.width}}" "\${HEIGHT:=${DEFAULT_SCREEN.height}}" "\${DPI:=${DEFAULT_SCREEN.dpi}}"
export DISPLAY=:0
# The framebuffer is the largest screen; the screen in use is a mode within it.
setsid -f /usr/bin/Xvfb.real :0 -ac -screen 0 ${MAX_SCREEN.width}x${MAX_SCREEN.height}x24 -retro -dpi "$DPI" -nolisten tcp -nolisten unix >/tmp/xvfb.log 2>&1
i=0
until xdpyinfo >/dev/null 2>&1; do i=$((i + 1)); [ $i -lt 600 ] || { echo "X did not start" >&2; exit 1; }; sleep 0.1; done
${SCREEN_SCRIPT} "$WIDTH" "$HEIGHT"
xset s off -dpms
setsid -f /usr/bin/startxfce4.real >/tmp/xfce4.log 2>&1
i=0
until xdotool search --onlyvisible --class xfce4-panel >/dev/null 2>&1; do i=$((i + 1)); [ $i -lt 1200 ] || { echo "the XFCE panel did not appear" >&2; exit 1; }; sleep 0.1; done
${SCREEN_SCRIPT} "$WIDTH" "$HEIGHT" "$DPI"
`;

const XVFB = `#!/bin/sh
# The desktop runs from boot (forgevm-desktop.service). A client that starts an X server itself, as
# E2B's desktop SDK does on create, keeps the running one and gets the screen it asks for as a mode
# of it (the screen script: no restart); one larger than the running server's framebuffer gets a
# new server of that size (the old one's session ends with it).
display=\${1:-}
case "$display" in :[0-9]*) ;; *) exec /usr/bin/Xvfb.real "$@" ;; esac
want=$(printf '%s\\n' "$*" | sed -n 's/.*-screen [0-9][0-9]* \\([0-9][0-9]*x[0-9][0-9]*\\).*/\\1/p')
dpi=$(printf '%s\\n' "$*" | sed -n 's/.*-dpi \\([0-9][0-9]*\\).*/\\1/p')
if xdpyinfo -display "$display" >/dev/null 2>&1; then
  [ -z "$want" ] && exit 0
  DISPLAY=$display ${SCREEN_SCRIPT} "\${want%x*}" "\${want#*x}" $dpi && exit 0
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

/**
 * x11vnc's TERM handler (HUP's and QUIT's too) makes X calls, and libX11 1.8 (Debian 12's) locks
 * every display: a signal that lands while x11vnc waits inside Xlib for the X server's answer, as
 * it does all the time a viewer watches, leaves the handler waiting for ever on the lock its own
 * interrupted call holds. Reproduced every time by stopping the X server for a second under a
 * watching viewer (the desktop test does); under TCG it also came unforced, in about one desktop
 * test run of eight, and under KVM it can as well, less often, as the window is as wide as the
 * server's answers are slow. E2B's desktop SDK stops its stream with `pkill x11vnc` and refuses to
 * start one while an x11vnc runs, so a hung one ended its live view for good. The wrapper starts
 * the watcher and runs the real x11vnc under its own name (the SDK finds it with `pgrep -x x11vnc`,
 * the desktop's processes by its command line).
 */
const X11VNC_REAL = "/usr/local/lib/forgevm-desktop/x11vnc.real/x11vnc";
const VNC_WATCH = "/usr/local/lib/forgevm-desktop/vnc-term-watch";
const X11VNC = `#!/bin/bash
setsid -f ${VNC_WATCH} </dev/null >/dev/null 2>&1
exec -a x11vnc ${X11VNC_REAL} "$@"
`;

/**
 * One per user, while any of the user's x11vnc runs: an x11vnc seen inside one of those handlers
 * (the signal blocked, which x11vnc does nowhere else) at three looks a second apart is killed,
 * and the journal says so. Its name leaves out "x11vnc", or the SDK's `pkill x11vnc` would end it too.
 */
const VNC_TERM_WATCH = `#!/bin/bash
set -u
uid=$(id -u)
exec 9>>"/tmp/.forgevm-vnc-term-watch.$uid" || exit 0
flock -n 9 || exit 0
# SIGHUP, SIGQUIT and SIGTERM in /proc's signal masks.
handled=$((1 << 0 | 1 << 2 | 1 << 14))
declare -A inside=() seen=()
idle=0
while [ $idle -lt 10 ]; do
  sleep 1
  pids=$(pgrep -u "$uid" -x x11vnc) || { idle=$((idle + 1)); inside=(); continue; }
  idle=0
  seen=()
  for p in $pids; do
    blocked=0
    while read -r key value; do [ "$key" = SigBlk: ] && blocked=$value && break; done 2>/dev/null <"/proc/$p/status"
    (( 16#$blocked & handled )) || continue
    seen[$p]=$(( \${inside[$p]:-0} + 1 ))
    if [ "\${seen[$p]}" -ge 3 ] && kill -KILL "$p" 2>/dev/null; then
      logger -t forgevm-vnc-term-watch "killed x11vnc $p, inside its signal handler for 3 s (a signal during an X call)"
    fi
  done
  inside=()
  for p in "\${!seen[@]}"; do inside[$p]=\${seen[$p]}; done
done
exec 9>&-
# An x11vnc started while this watcher gave up found the lock taken: look once more.
pgrep -u "$uid" -x x11vnc >/dev/null && exec "$0"
exit 0
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

/**
 * How Firefox reaches the web, whatever the sandbox's network: through the egress proxy on the
 * guest's loopback where there is one (an allowlisted sandbox, whose only way out it is), else
 * directly (a sandbox with a network device has no proxy: the refused connection sends Firefox
 * straight on). The guest's own servers are reached directly. A proxy file rather than the
 * environment, because Firefox started from the desktop's menu has no proxy variables.
 */
const PROXY_PAC = `function FindProxyForURL(url, host) {
  if (isPlainHostName(host) || host === "localhost" || shExpMatch(host, "*.localhost") || shExpMatch(host, "127.*") || host === "[::1]" || host === "::1") return "DIRECT";
  return "PROXY ${GUEST_PROXY_ADDR}:${GUEST_PROXY_PORT}; DIRECT";
}
`;
const PROXY_PAC_FILE = "/usr/local/lib/forgevm-desktop/proxy.pac";

/**
 * Firefox as a sandbox's user meets it: no first-run pages, no update or default-browser checks,
 * and the egress CA trusted when the sandbox has one (egress rules write it before any browser
 * starts; a Firefox already running when rules are first set trusts it from its next start).
 */
const FIREFOX_POLICIES = {
  policies: {
    Certificates: { Install: [GUEST_CA_FILE] },
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
 * is a large program started again, which under TCG takes tens of seconds), networking and media
 * decoding in the main process, no preloaded spare process or new-tab page, and nothing that calls home (safe browsing, telemetry, studies, the
 * new-tab feeds, remote settings, update and region checks, the connectivity and captive-portal
 * probes, the video codec's download). In a sandbox whose only way out is an allowlist, each of
 * those is a request refused at the egress proxy; under TCG they were the browser's busiest half
 * minute after its first page (docs/benchmarks.md, desktop).
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
  "browser.newtab.preload": false,
  "browser.newtabpage.enabled": false,
  "browser.startup.page": 0,
  "browser.search.update": false,
  "browser.region.update.enabled": false,
  "browser.region.network.url": "",
  "browser.discovery.enabled": false,
  "browser.urlbar.quicksuggest.enabled": false,
  "browser.safebrowsing.blockedURIs.enabled": false,
  "browser.safebrowsing.passwords.enabled": false,
  "browser.ping-centre.telemetry": false,
  "extensions.getAddons.cache.enabled": false,
  "extensions.update.enabled": false,
  "extensions.systemAddon.update.enabled": false,
  "toolkit.telemetry.unified": false,
  "toolkit.telemetry.archive.enabled": false,
  "datareporting.healthreport.uploadEnabled": false,
  "services.settings.server": "data:,#remote-settings-off",
  "network.connectivity-service.enabled": false,
  "network.captive-portal-service.enabled": false,
  "network.process.enabled": false,
  "media.rdd-process.enabled": false,
  "media.gmp-manager.updateEnabled": false,
  "media.gmp-gmpopenh264.enabled": false,
  "network.proxy.type": 2,
  "network.proxy.autoconfig_url": `file://${PROXY_PAC_FILE}`,
})
  .map(([k, v]) => `pref(${JSON.stringify(k)}, ${JSON.stringify(v)});\n`)
  .join("");

/** Files written into the image (paths relative to its root). */
export const DESKTOP_FILES: Record<string, string> = {
  "usr/local/lib/forgevm-desktop/start": START,
  [SCREEN_SCRIPT.slice(1)]: SCREEN,
  "usr/local/lib/forgevm-desktop/Xvfb": XVFB,
  "usr/local/lib/forgevm-desktop/startxfce4": STARTXFCE4,
  "usr/local/lib/forgevm-desktop/x11vnc": X11VNC,
  [VNC_WATCH.slice(1)]: VNC_TERM_WATCH,
  "etc/systemd/system/forgevm-desktop.service": UNIT,
  // No compositing: under a virtual framebuffer xfwm4 composites in software, which costs every
  // redraw (and a session's start) CPU for shadows nobody needs.
  "etc/xdg/xfce4/xfconf/xfce-perchannel-xml/xfwm4.xml": `<?xml version="1.0" encoding="UTF-8"?>
<channel name="xfwm4" version="1.0">
  <property name="general" type="empty">
    <property name="use_compositing" type="bool" value="false"/>
  </property>
</channel>
`,
  "usr/lib/firefox-esr/distribution/policies.json": `${JSON.stringify(FIREFOX_POLICIES, null, 2)}\n`,
  "usr/lib/firefox-esr/browser/defaults/preferences/forgevm.js": FIREFOX_PREFS,
  [PROXY_PAC_FILE.slice(1)]: PROXY_PAC,
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
  // x11vnc's keeps its name (a process is found by it), in a directory of its own.
  `mkdir -p ${X11VNC_REAL.slice(0, X11VNC_REAL.lastIndexOf("/"))} && dpkg-divert --quiet --local --rename --divert ${X11VNC_REAL} --add /usr/bin/x11vnc && ln -s /usr/local/lib/forgevm-desktop/x11vnc /usr/bin/x11vnc`,
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
