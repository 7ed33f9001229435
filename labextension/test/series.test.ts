import { defaultMetric, MetricSeries } from '../src/model/series';
import { sparkline } from '../src/model/sparkline';
import { row } from './fixtures';

describe('MetricSeries', () => {
  it('keeps a curve per trial and group, for each metric', () => {
    const series = new MetricSeries();
    series.add(row(1, 8, 2, { loss: 1.0 }));
    series.add(row(2, 7, 2, { loss: 0.9 }));
    series.add(row(3, 7, 4, { loss: 0.5, lr: 0.1 }));
    series.add(row(4, 7, 4, { validation_loss: 0.6 }, 'validation'));

    expect(series.metricNames()).toEqual(['loss', 'lr', 'validation_loss']);
    expect(series.traces('loss')).toEqual([
      { trialId: 7, group: 'training', name: 'trial 7 training', x: [2, 4], y: [0.9, 0.5] },
      { trialId: 8, group: 'training', name: 'trial 8 training', x: [2], y: [1.0] }
    ]);
    expect(series.traces('validation_loss').map(t => t.name)).toEqual(['trial 7 validation']);
    expect(series.lastId).toBe(4);
    expect(series.size).toBe(4);
  });

  it('drops the reports after an earlier step, as a restarted trial reports them again', () => {
    const series = new MetricSeries();
    [2, 4, 6].forEach((step, i) => series.add(row(i + 1, 7, step, { loss: step })));
    series.add(row(4, 7, 4, { loss: 40 }));
    expect(series.traces('loss')[0]).toMatchObject({ x: [2, 4], y: [2, 40] });
  });

  it('drops what the master rolled back of a trial, in every group, and nothing else', () => {
    const series = new MetricSeries();
    [2, 4, 6].forEach((step, i) => series.add(row(i + 1, 7, step, { loss: step })));
    series.add(row(4, 7, 6, { validation_loss: 0.5 }, 'validation'));
    series.add(row(5, 8, 6, { loss: 60 }));
    const before = series.revision;
    series.rollBack(7, 3);
    expect(series.traces('loss').map(t => [t.trialId, t.x])).toEqual([
      [7, [2]],
      [8, [6]]
    ]);
    expect(series.traces('validation_loss')).toEqual([]);
    expect(series.revision).toBeGreaterThan(before);
    const after = series.revision;
    series.rollBack(7, 3);
    expect(series.revision).toBe(after);
  });

  it('counts a revision per report, and none for a report seen twice', () => {
    const series = new MetricSeries();
    series.add(row(1, 7, 2, { loss: 1 }));
    series.add(row(1, 7, 2, { loss: 1 }));
    expect(series.revision).toBe(1);
  });
});

describe('defaultMetric', () => {
  it('prefers the training loss, then the searcher metric', () => {
    expect(defaultMetric(['accuracy', 'loss', 'validation_loss'], 'validation_loss')).toBe('loss');
    expect(defaultMetric(['accuracy', 'validation_error'], 'validation_error')).toBe(
      'validation_error'
    );
    expect(defaultMetric(['accuracy'], 'validation_error')).toBe('accuracy');
    expect(defaultMetric([], 'validation_error')).toBeNull();
  });
});

describe('sparkline', () => {
  it('scales the points into the box, y upwards', () => {
    const line = sparkline(
      [
        { x: 0, y: 1 },
        { x: 5, y: 0.5 },
        { x: 10, y: 0 }
      ],
      24,
      14,
      2
    );
    expect(line.path).toBe('M2 2 L12 7 L22 12');
    expect(line.last).toEqual({ x: 22, y: 12 });
  });

  it('draws a flat series across the middle and one point as a dot only', () => {
    expect(
      sparkline(
        [
          { x: 0, y: 3 },
          { x: 1, y: 3 }
        ],
        24,
        14,
        2
      ).path
    ).toBe('M2 7 L22 7');
    expect(sparkline([{ x: 4, y: 3 }], 24, 14, 2)).toEqual({ path: '', last: { x: 12, y: 7 } });
  });

  it('leaves out non-finite points', () => {
    expect(sparkline([{ x: 0, y: Number.NaN }], 24, 14)).toEqual({ path: '', last: null });
  });
});
