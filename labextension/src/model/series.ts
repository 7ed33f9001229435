/** Metric curves of an experiment's trials, kept as reports arrive, for its chart. */

import { IMetricRow } from '../api/types';

/** One curve of the chart: a metric of one trial in one group. */
export interface ITrace {
  trialId: number;
  group: string;
  name: string;
  x: number[];
  y: number[];
  /** The trial's colour where a view gives one (Plotly's own order otherwise). */
  colour?: string;
}

interface IReport {
  id: number;
  step: number;
  metrics: Record<string, number | null>;
}

/** The reports of every trial and group, in step order. */
export class MetricSeries {
  /** The greatest row id added. */
  get lastId(): number {
    return this._lastId;
  }

  /** Grows with every report added: a chart redraws only when it changed. */
  get revision(): number {
    return this._revision;
  }

  /** How many reports are kept, over all trials and groups. */
  get size(): number {
    let n = 0;
    for (const reports of this._reports.values()) {
      n += reports.length;
    }
    return n;
  }

  /**
   * Adds a report. A report at an earlier step than the last of its trial and group means the
   * trial went back to an earlier checkpoint: the reports after it are dropped, as the master
   * drops them.
   */
  add(row: IMetricRow): void {
    if (row.trial_id === undefined) {
      throw new Error(`metric row ${row.id} has no trial id`);
    }
    const key = `${row.trial_id}\u0000${row.group}`;
    let reports = this._reports.get(key);
    if (!reports) {
      reports = [];
      this._reports.set(key, reports);
    }
    const report = { id: row.id, step: row.steps_completed, metrics: row.metrics };
    const last = reports[reports.length - 1];
    if (last && row.steps_completed < last.step) {
      const cut = reports.findIndex(r => r.step >= row.steps_completed);
      reports.splice(cut);
    } else if (last && row.steps_completed === last.step && row.id === last.id) {
      return;
    }
    reports.push(report);
    this._revision += 1;
    for (const [name, value] of Object.entries(row.metrics)) {
      if (typeof value === 'number') {
        this._names.add(name);
      }
    }
    this._lastId = Math.max(this._lastId, row.id);
  }

  /**
   * Drops a trial's reports past `steps`, in every group: the master rolled them back, as a
   * new run of the trial trains those steps again.
   */
  rollBack(trialId: number, steps: number): void {
    for (const [key, reports] of this._reports) {
      if (Number(key.split('\u0000')[0]) !== trialId) {
        continue;
      }
      const cut = reports.findIndex(r => r.step > steps);
      if (cut >= 0) {
        reports.splice(cut);
        this._revision += 1;
      }
    }
  }

  /** The names of the metrics with at least one number, sorted. */
  metricNames(): string[] {
    return [...this._names].sort();
  }

  /** The curves of `metric`: one per trial and group that reported it, by trial then group. */
  traces(metric: string): ITrace[] {
    const traces: ITrace[] = [];
    for (const [key, reports] of this._reports) {
      const [trial, group] = key.split('\u0000');
      const x: number[] = [];
      const y: number[] = [];
      for (const report of reports) {
        const value = report.metrics[metric];
        if (typeof value === 'number') {
          x.push(report.step);
          y.push(value);
        }
      }
      if (x.length) {
        const trialId = Number(trial);
        traces.push({ trialId, group, name: `trial ${trialId} ${group}`, x, y });
      }
    }
    return traces.sort((a, b) => a.trialId - b.trialId || a.group.localeCompare(b.group));
  }

  private _lastId = 0;
  private _revision = 0;
  private readonly _names = new Set<string>();
  private readonly _reports = new Map<string, IReport[]>();
}

/**
 * The metric a chart opens on: the training `loss` when reported (a curve from the first
 * reports on), else the searcher's metric, else the first metric there is (null with none).
 */
export function defaultMetric(names: readonly string[], searcherMetric: string): string | null {
  for (const preferred of ['loss', searcherMetric]) {
    if (names.includes(preferred)) {
      return preferred;
    }
  }
  return names[0] ?? null;
}
