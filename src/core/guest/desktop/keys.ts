// Key names as computer-use clients send them, checked and turned into X keysyms on the host:
// a name that is not here is a 400 before anything is pressed (xdotool would skip an unknown name
// and press the rest of a combination).
import { badRequest } from "../../../http/errors.js";

/** The names clients use (any case) → the X keysym; Daytona's, E2B's desktop SDK's and the computer-use tool definitions' words. */
const ALIASES: Record<string, string> = {
  enter: "Return",
  return: "Return",
  tab: "Tab",
  esc: "Escape",
  escape: "Escape",
  backspace: "BackSpace",
  delete: "Delete",
  del: "Delete",
  insert: "Insert",
  home: "Home",
  end: "End",
  pageup: "Page_Up",
  page_up: "Page_Up",
  pagedown: "Page_Down",
  page_down: "Page_Down",
  up: "Up",
  down: "Down",
  left: "Left",
  right: "Right",
  arrowup: "Up",
  arrowdown: "Down",
  arrowleft: "Left",
  arrowright: "Right",
  space: "space",
  ctrl: "ctrl",
  control: "ctrl",
  alt: "alt",
  option: "alt",
  shift: "shift",
  super: "super",
  meta: "super",
  cmd: "super",
  command: "super",
  win: "super",
  windows: "super",
  capslock: "Caps_Lock",
  caps_lock: "Caps_Lock",
  numlock: "Num_Lock",
  printscreen: "Print",
  print: "Print",
  pause: "Pause",
  menu: "Menu",
};

/** X keysym names taken as they are (case matters in X; these are matched exactly). */
const KEYSYMS = new Set([
  "Return",
  "Tab",
  "Escape",
  "BackSpace",
  "Delete",
  "Insert",
  "Home",
  "End",
  "Page_Up",
  "Page_Down",
  "Prior",
  "Next",
  "Up",
  "Down",
  "Left",
  "Right",
  "space",
  "Shift_L",
  "Shift_R",
  "Control_L",
  "Control_R",
  "Alt_L",
  "Alt_R",
  "Super_L",
  "Super_R",
  "Meta_L",
  "Meta_R",
  "Caps_Lock",
  "Num_Lock",
  "Scroll_Lock",
  "Print",
  "Pause",
  "Menu",
  "KP_Enter",
  "KP_Add",
  "KP_Subtract",
  "KP_Multiply",
  "KP_Divide",
  "KP_Decimal",
  "minus",
  "plus",
  "equal",
  "comma",
  "period",
  "slash",
  "backslash",
  "semicolon",
  "colon",
  "apostrophe",
  "quotedbl",
  "grave",
  "asciitilde",
  "bracketleft",
  "bracketright",
  "braceleft",
  "braceright",
  "parenleft",
  "parenright",
  "less",
  "greater",
  "question",
  "exclam",
  "at",
  "numbersign",
  "dollar",
  "percent",
  "asciicircum",
  "ampersand",
  "asterisk",
  "underscore",
  "bar",
  "XF86AudioMute",
  "XF86AudioLowerVolume",
  "XF86AudioRaiseVolume",
  "XF86AudioPlay",
  "XF86AudioNext",
  "XF86AudioPrev",
  "XF86Back",
  "XF86Forward",
  "XF86Reload",
  "XF86HomePage",
  "XF86Search",
]);

/** Printable characters that are not their own keysym's name → that name. */
const PUNCTUATION: Record<string, string> = {
  "-": "minus",
  "+": "plus",
  "=": "equal",
  ",": "comma",
  ".": "period",
  "/": "slash",
  "\\": "backslash",
  ";": "semicolon",
  ":": "colon",
  "'": "apostrophe",
  '"': "quotedbl",
  "`": "grave",
  "~": "asciitilde",
  "[": "bracketleft",
  "]": "bracketright",
  "{": "braceleft",
  "}": "braceright",
  "(": "parenleft",
  ")": "parenright",
  "<": "less",
  ">": "greater",
  "?": "question",
  "!": "exclam",
  "@": "at",
  "#": "numbersign",
  $: "dollar",
  "%": "percent",
  "^": "asciicircum",
  "&": "ampersand",
  "*": "asterisk",
  _: "underscore",
  "|": "bar",
  " ": "space",
};

/** One key's X keysym, or a 400 naming `field`. */
export function keysym(name: string, field = "key"): string {
  if (typeof name !== "string" || name.length === 0) throw badRequest(`${field} must name a key`);
  if (name.length === 1) {
    if (/^[A-Za-z0-9]$/.test(name)) return name;
    const p = PUNCTUATION[name];
    if (p) return p;
  }
  const alias = ALIASES[name.toLowerCase()];
  if (alias) return alias;
  const f = /^f([1-9]|1[0-9]|2[0-4])$/i.exec(name);
  if (f) return `F${f[1]}`;
  if (KEYSYMS.has(name)) return name;
  throw badRequest(
    `${field}: unknown key "${name.slice(0, 40)}"; use a letter, a digit, a punctuation character, F1-F24, or a name such as enter, tab, escape, backspace, delete, home, end, pageup, pagedown, up, down, left, right, space, ctrl, alt, shift, super (docs/desktop.md)`,
  );
}

/** A combination ("ctrl+shift+t", or its keys as a list) as xdotool's `key` takes it, each key checked. */
export function combination(keys: string | string[], field = "keys"): string {
  const list = Array.isArray(keys) ? keys : keys === "+" ? ["+"] : keys.split("+").map((k) => k.trim());
  if (list.length === 0 || list.length > 8) throw badRequest(`${field} must name 1 to 8 keys`);
  return list.map((k) => keysym(k, field)).join("+");
}
