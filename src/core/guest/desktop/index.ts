// The desktop of a sandbox made from the desktop image (docs/desktop.md), as every interface
// drives it: one module per kind of operation.
export { click, cursor, drag, move, press, pressButton, pressEach, scroll, type } from "./input.js";
export { combination, keysym } from "./keys.js";
export { DESKTOP_PROCESSES, processLog, processState, processStates, restartProcess, startDesktop, stopDesktop, type DesktopProcess, type ProcessState } from "./processes.js";
export type { DesktopGuest } from "./run.js";
export { screen, screenshot, setScreen, windows, type Screen, type Shot, type ShotOptions, type WindowInfo } from "./screen.js";
export { deleteRecording, listRecordings, recording, startRecording, stopRecording, type Recording } from "./recordings.js";
export { STREAM_PORT, startStream, stopStream, type StreamMode } from "./stream.js";
