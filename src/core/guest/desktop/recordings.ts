// Screen recordings of a desktop: recordmydesktop on the display, as the desktop's user, writing
// Ogg Theora (.ogv) into that user's ~/recordings. Not MP4: Debian's ffmpeg brings 78 packages
// into an image built on every set-up, recordmydesktop a handful. A recording's facts (its file,
// its label, its recorder's pid, when it started and ended) live beside the guest's other state
// in /var/lib/forgevm/recordings, so they outlive the server and a pause; what the guest says of
// them is parsed as numbers and bounded text, and an id is only ever one this module made.
import { randomBytes } from "node:crypto";
import { badRequest, conflict, notFound } from "../../../http/errors.js";
import { shellQuote } from "../../../util/shell-quote.js";
import { DESKTOP_USER } from "./processes.js";
import { type DesktopGuest, runOnDesktop } from "./run.js";

export interface Recording {
  id: string;
  label: string;
  /** Absolute, in the guest. */
  file: string;
  startedAt: Date;
  endedAt: Date | null;
  status: "recording" | "completed";
  sizeBytes: number;
}

const FACTS = "/var/lib/forgevm/recordings";
const FRAMES_PER_SECOND = 10;
const ID = /^[0-9a-f]{16}$/;
const NO_RECORDER = 30;
const NO_SUCH = 31;
/** A label becomes part of the file's name: letters, digits, "_", "-" and "." only. */
const LABEL = /^[A-Za-z0-9_.-]{1,100}$/;

/** One line per recording: id, start ms, end ms (0 while it runs), size, whether its recorder runs, file, label. */
const DESCRIBE = `describe() {
  [ -f "${FACTS}/$1.file" ] || return 0
  f=$(cat "${FACTS}/$1.file"); s=$(cat "${FACTS}/$1.start" 2>/dev/null || echo 0); e=$(cat "${FACTS}/$1.end" 2>/dev/null || echo 0)
  p=$(cat "${FACTS}/$1.pid" 2>/dev/null || echo 0); r=0; [ "$p" -gt 0 ] 2>/dev/null && kill -0 "$p" 2>/dev/null && r=1
  b=$(stat -c %s "$f" 2>/dev/null || echo 0)
  printf '%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n' "$1" "$s" "$e" "$b" "$r" "$f" "$(cat "${FACTS}/$1.label" 2>/dev/null)"
}
`;

function parse(out: string): Recording[] {
  const list: Recording[] = [];
  for (const line of out.split("\n")) {
    const [id, start, end, size, running, file, label] = line.split("\t");
    if (!ID.test(id ?? "") || !file) continue;
    const ms = (v: string | undefined) => (/^\d{1,15}$/.test(v ?? "") ? Number(v) : 0);
    const ended = ms(end);
    list.push({
      id,
      label: (label ?? "").slice(0, 100),
      file: file.slice(0, 4096),
      startedAt: new Date(ms(start)),
      endedAt: ended ? new Date(ended) : null,
      status: running === "1" && !ended ? "recording" : "completed",
      sizeBytes: ms(size),
    });
  }
  return list.sort((a, b) => a.startedAt.getTime() - b.startedAt.getTime());
}

const missing = (guest: DesktopGuest) => () =>
  conflict(`sandbox ${guest.id}'s desktop image has no screen recorder (recordmydesktop): rebuild it (sudo forgevm image system desktop)`);
const unknown = (id: string) => () => notFound(`recording ${id} not found`);

/** Starts recording the whole screen; `label` names the file (else the time it started). */
export async function startRecording(guest: DesktopGuest, label?: string): Promise<Recording> {
  if (label !== undefined && !LABEL.test(label)) throw badRequest(`label must be 1-100 letters, digits, "_", "." or "-", got ${JSON.stringify(label).slice(0, 120)}`);
  const id = randomBytes(8).toString("hex");
  const name = `${label ?? "recording"}-${new Date().toISOString().replace(/[:.]/g, "-")}-${id.slice(0, 6)}.ogv`;
  const out = await runOnDesktop(
    guest,
    `command -v recordmydesktop >/dev/null 2>&1 || exit ${NO_RECORDER}
${DESKTOP_USER}
h=$(getent passwd "$u" | cut -d: -f6); d="$h/recordings"; f="$d/"${shellQuote(name)}
mkdir -p "$d" ${FACTS} && chown "$u:" "$d" || exit 1
printf '%s' "$f" > ${FACTS}/${id}.file; printf '%s' ${shellQuote(label ?? "")} > ${FACTS}/${id}.label; date +%s%3N > ${FACTS}/${id}.start
runuser -u "$u" -- setsid -f recordmydesktop --display :0 --no-sound --no-frame --overwrite --fps ${FRAMES_PER_SECOND} --on-the-fly-encoding -o "$f" >${FACTS}/${id}.log 2>&1
i=0; until p=$(pgrep -n -f "^recordmydesktop .* -o $f\\$") || [ $i -ge 50 ]; do i=$((i + 1)); sleep 0.1; done
[ -n "$p" ] || { cat ${FACTS}/${id}.log >&2; rm -f ${FACTS}/${id}.*; exit 1; }
echo "$p" > ${FACTS}/${id}.pid
${DESCRIBE}describe ${id}`,
    { exits: { [NO_RECORDER]: missing(guest) }, timeoutMs: 30_000 },
  );
  const [made] = parse(out);
  if (!made) throw conflict(`sandbox ${guest.id}: the recording did not start`);
  return made;
}

/** Stops a recording and waits for its file to be complete (the recorder encodes what is left). */
export async function stopRecording(guest: DesktopGuest, id: string): Promise<Recording> {
  if (!ID.test(id)) throw unknown(id)();
  const out = await runOnDesktop(
    guest,
    `[ -f ${FACTS}/${id}.file ] || exit ${NO_SUCH}
p=$(cat ${FACTS}/${id}.pid 2>/dev/null || echo 0)
if [ "$p" -gt 0 ] 2>/dev/null && kill -0 "$p" 2>/dev/null; then
  kill -INT "$p"
  i=0; while kill -0 "$p" 2>/dev/null && [ $i -lt 1500 ]; do i=$((i + 1)); sleep 0.1; done
  kill -0 "$p" 2>/dev/null && kill -KILL "$p"
fi
[ -f ${FACTS}/${id}.end ] || date +%s%3N > ${FACTS}/${id}.end
${DESCRIBE}describe ${id}`,
    { exits: { [NO_SUCH]: unknown(id) }, timeoutMs: 180_000, displayOff: true },
  );
  const [stopped] = parse(out);
  if (!stopped) throw unknown(id)();
  return stopped;
}

/** Every recording of the sandbox, running or done, oldest first. */
export async function listRecordings(guest: DesktopGuest): Promise<Recording[]> {
  const out = await runOnDesktop(guest, `${DESCRIBE}for f in ${FACTS}/*.file; do [ -f "$f" ] || continue; n=\${f##*/}; describe "\${n%.file}"; done`, {
    displayOff: true,
  });
  return parse(out);
}

/** One recording (a 404 for an id that is not one). */
export async function recording(guest: DesktopGuest, id: string): Promise<Recording> {
  if (!ID.test(id)) throw unknown(id)();
  const [found] = parse(await runOnDesktop(guest, `${DESCRIBE}describe ${id}`, { displayOff: true }));
  if (!found) throw unknown(id)();
  return found;
}

/** Removes a recording and its file, stopping it first if it runs. */
export async function deleteRecording(guest: DesktopGuest, id: string): Promise<void> {
  if (!ID.test(id)) throw unknown(id)();
  await runOnDesktop(
    guest,
    `[ -f ${FACTS}/${id}.file ] || exit ${NO_SUCH}
p=$(cat ${FACTS}/${id}.pid 2>/dev/null || echo 0)
[ "$p" -gt 0 ] 2>/dev/null && kill -KILL "$p" 2>/dev/null
rm -f "$(cat ${FACTS}/${id}.file)" ${FACTS}/${id}.*`,
    { exits: { [NO_SUCH]: unknown(id) }, displayOff: true },
  );
}
