/**
 * Hyperparameters as a trials table shows them: dotted names for nested ones, a column for each
 * one whose value differs between the trials, and values rounded as the dashboard rounds them
 * (det_hub/search_view.py's `flatten` and `hparam_columns`, det_hub/service/pages.py's
 * `short_value`).
 */

/** Nested hyperparameters as one mapping of dotted names to values. */
export function flattenHparams(
  hparams: Record<string, unknown> | null | undefined,
  prefix = ''
): Record<string, unknown> {
  const flat: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(hparams ?? {})) {
    const name = `${prefix}${key}`;
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      Object.assign(flat, flattenHparams(value as Record<string, unknown>, `${name}.`));
    } else {
      flat[name] = value;
    }
  }
  return flat;
}

/**
 * A number as Python's `format(value, '.{precision}g')` writes it: `precision` significant
 * digits, trailing zeros dropped, and an exponent (`1e-05`, `1.234e+04`) below 1e-4 or from
 * 10 ** precision up. A tie rounds up here where Python rounds it to even.
 */
export function formatG(value: number, precision = 4): string {
  if (!Number.isFinite(value)) {
    return Number.isNaN(value) ? 'nan' : value > 0 ? 'inf' : '-inf';
  }
  if (value === 0) {
    return '0';
  }
  const [mantissa, power] = value.toExponential(precision - 1).split('e');
  const exponent = Number(power);
  const trim = (text: string): string => (text.includes('.') ? text.replace(/\.?0+$/, '') : text);
  if (exponent < -4 || exponent >= precision) {
    const digits = String(Math.abs(exponent)).padStart(2, '0');
    return `${trim(mantissa)}e${exponent < 0 ? '-' : '+'}${digits}`;
  }
  return trim(value.toFixed(precision - 1 - exponent));
}

/**
 * A hyperparameter's value as a table shows it: fractions to 4 significant digits, lists as
 * `[a, b]`, nested ones as `{name=value}`, text as it is, anything else as JSON. JSON does not
 * tell `1.0` from `1`: whole numbers are written whole.
 */
export function shortValue(value: unknown): string {
  if (typeof value === 'number') {
    return Number.isInteger(value) ? String(value) : formatG(value, 4);
  }
  if (Array.isArray(value)) {
    return `[${value.map(shortValue).join(', ')}]`;
  }
  if (value && typeof value === 'object') {
    const pairs = Object.entries(value as Record<string, unknown>);
    return `{${pairs.map(([key, inner]) => `${key}=${shortValue(inner)}`).join(', ')}}`;
  }
  if (typeof value === 'string') {
    return value;
  }
  return value === undefined ? 'null' : JSON.stringify(value);
}

/** A trials table's hyperparameter columns, and the values every trial shares. */
export interface IHparamColumns {
  /** Dotted names of the hyperparameters whose value differs between the trials, sorted. */
  columns: string[];
  /** The others, with the value they all have. */
  fixed: Record<string, unknown>;
}

/** Which hyperparameters get a column of their own in a table of these trials. */
export function hparamColumns(
  trials: readonly { hparams: Record<string, unknown> | null }[]
): IHparamColumns {
  const flat = trials.map(t => flattenHparams(t.hparams));
  const names = [...new Set(flat.flatMap(Object.keys))].sort();
  // A missing value and null are the same value, as in Python (None).
  const same = (name: string): boolean =>
    new Set(flat.map(values => JSON.stringify(values[name] ?? null))).size <= 1;
  const columns = names.filter(name => !same(name));
  const fixed: Record<string, unknown> = {};
  for (const name of names) {
    if (!columns.includes(name)) {
      fixed[name] = flat[0][name] ?? null;
    }
  }
  return { columns, fixed };
}

/** Hyperparameters as `name=value` pairs on one line, nested ones with dotted names. */
export function hparamsText(hparams: Record<string, unknown> | null | undefined): string {
  return Object.entries(flattenHparams(hparams))
    .map(([name, value]) => `${name}=${shortValue(value)}`)
    .join(', ');
}
