// Events: the whole event log, with a node's details beside it; filtered by the file range
// last selected on the memory view, if any.

import { setChildren } from "../dom.js";
import { eventLog } from "../eventlog.js";
import { state } from "../store.js";

export function render(section) {
  section.classList.add("fill");
  setChildren(section);
  const log = eventLog(section);
  if (state.fileRange) log.setFilter({ file_lo: state.fileRange[0], file_hi: state.fileRange[1] });
}
