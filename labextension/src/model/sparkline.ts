/** The geometry of a small inline line chart of a metric's curve, drawn as SVG. */

export interface IPoint {
  x: number;
  y: number;
}

export interface ISparkline {
  /** The SVG path (`M x y L x y ...`); empty with fewer than two points. */
  path: string;
  /** Where the last point is drawn (a dot marks it), or null without points. */
  last: IPoint | null;
}

/**
 * The points scaled into a `width` by `height` box with `pad` pixels of margin, y growing
 * upwards. Points with a non-finite coordinate are left out; a flat series is drawn across the
 * middle.
 */
export function sparkline(
  points: readonly IPoint[],
  width: number,
  height: number,
  pad = 2
): ISparkline {
  const kept = points.filter(p => Number.isFinite(p.x) && Number.isFinite(p.y));
  if (kept.length === 0) {
    return { path: '', last: null };
  }
  const xs = kept.map(p => p.x);
  const ys = kept.map(p => p.y);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const innerW = width - 2 * pad;
  const innerH = height - 2 * pad;
  const place = (p: IPoint): IPoint => ({
    x: round(pad + (x1 === x0 ? innerW / 2 : ((p.x - x0) / (x1 - x0)) * innerW)),
    y: round(pad + (y1 === y0 ? innerH / 2 : (1 - (p.y - y0) / (y1 - y0)) * innerH))
  });
  const placed = kept.map(place);
  const path =
    placed.length < 2 ? '' : placed.map((p, i) => `${i === 0 ? 'M' : 'L'}${p.x} ${p.y}`).join(' ');
  return { path, last: placed[placed.length - 1] };
}

function round(value: number): number {
  return Math.round(value * 10) / 10;
}
