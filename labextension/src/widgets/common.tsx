/** Small pieces the panel's views share. */

import * as React from 'react';

import { IPoint, sparkline } from '../model/sparkline';

/** An experiment's or trial's state as a coloured badge. */
export function StateBadge(props: { state: string; runState?: string | null }): JSX.Element {
  const { state, runState } = props;
  const text = runState === 'WAITING' ? `${state} (waiting to be promoted)` : state;
  return (
    <span className={`jp-DetHub-state jp-DetHub-state-${state.toLowerCase()}`} data-state={state}>
      {text}
    </span>
  );
}

/** A progress bar for a fraction 0..1 (nothing for null). */
export function Progress(props: { value: number | null | undefined }): JSX.Element {
  const value = props.value;
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return <span className="jp-DetHub-progress jp-DetHub-progress-unknown" />;
  }
  const percent = Math.round(Math.min(Math.max(value, 0), 1) * 100);
  return (
    <span className="jp-DetHub-progress" title={`${percent}%`} data-progress={percent}>
      <span className="jp-DetHub-progress-bar" style={{ width: `${percent}%` }} />
      <span className="jp-DetHub-progress-text">{percent}%</span>
    </span>
  );
}

/** A small inline SVG line chart of a curve. */
export function Sparkline(props: {
  points: readonly IPoint[] | undefined;
  width?: number;
  height?: number;
  title?: string;
}): JSX.Element {
  const width = props.width ?? 80;
  const height = props.height ?? 18;
  const { path, last } = sparkline(props.points ?? [], width, height);
  return (
    <svg
      className="jp-DetHub-sparkline"
      width={width}
      height={height}
      viewBox={`0 0 ${width} ${height}`}
      role="img"
      data-points={props.points?.length ?? 0}
    >
      {props.title ? <title>{props.title}</title> : null}
      {path ? <path d={path} fill="none" stroke="currentColor" strokeWidth={1.2} /> : null}
      {last ? <circle cx={last.x} cy={last.y} r={1.8} fill="currentColor" /> : null}
    </svg>
  );
}

/** A byte count in B, KiB, MiB or GiB. */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined) {
    return '–';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

/** An ISO time as the browser's local date and time. */
export function formatTime(iso: string | null | undefined): string {
  if (!iso) {
    return '–';
  }
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}
