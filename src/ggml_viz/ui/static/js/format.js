// Numbers as the viewer writes them: durations, byte counts, counts, shares. Pure functions;
// a missing value (null or undefined) is written "—".

export function fmtNs(ns) {
  if (ns === null || ns === undefined || ns < 0) return "—";
  if (ns >= 1e9) return (ns / 1e9).toFixed(3) + " s";
  if (ns >= 1e6) return (ns / 1e6).toFixed(ns >= 1e8 ? 0 : 2) + " ms";
  if (ns >= 1e3) return (ns / 1e3).toFixed(1) + " µs";
  return Math.round(ns) + " ns";
}

export function fmtBytes(bytes) {
  if (bytes === null || bytes === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB"];
  let value = bytes,
    unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return (unit ? value.toFixed(1) : value.toFixed(0)) + " " + units[unit];
}

// A tensor value: four decimals, or scientific where that would hide it.
export const fmtNum = (x) =>
  x === null || x === undefined
    ? "—"
    : Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-3 && x !== 0)
      ? x.toExponential(3)
      : x.toFixed(4);
export const fmtPct = (x) => (x === null || x === undefined ? "—" : (100 * x).toFixed(1) + " %");
export const fmtInt = (x) => (x === null || x === undefined ? "—" : Number(x).toLocaleString("en-US"));

// A label cut to n characters, the last one an ellipsis.
export const truncate = (text, n) => (text && text.length > n ? text.slice(0, n - 1) + "…" : text || "");

// A rate (GB/s, GFLOP/s, FLOPs per byte): three significant digits or so, whatever its size.
export const fmtRate = (x) =>
  x === null || x === undefined || !Number.isFinite(x)
    ? "—"
    : x === 0
      ? "0"
      : Math.abs(x) >= 100
        ? x.toFixed(0)
        : Math.abs(x) >= 10
          ? x.toFixed(1)
          : Math.abs(x) >= 0.01
            ? x.toFixed(2)
            : x.toExponential(1);
