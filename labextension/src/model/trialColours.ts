/**
 * One colour per trial (or per compared experiment), the same in a view's table and on its
 * chart, from the palette the dashboard's charts use.
 */

export const PALETTE: readonly string[] = [
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#d62728',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf',
  '#393b79',
  '#ad494a',
  '#637939',
  '#8c6d31',
  '#843c39',
  '#7b4173',
  '#3182bd',
  '#e6550d',
  '#31a354',
  '#756bb1'
];

/** The `n`th colour (from 0): the palette's, then hues a golden angle apart, never repeated. */
export function colourAt(n: number): string {
  return n < PALETTE.length ? PALETTE[n] : `hsl(${Math.round((n * 137.508) % 360)}, 62%, 45%)`;
}

/**
 * Each trial's colour, by the order of their ids: a trial keeps its colour however a table is
 * sorted or filtered, and when later trials (with greater ids) join.
 */
export function trialColours(trialIds: Iterable<number>): Map<number, string> {
  const ids = [...new Set(trialIds)].sort((a, b) => a - b);
  return new Map(ids.map((id, n) => [id, colourAt(n)]));
}
