import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';

import { ITrial } from '../src/api/types';
import { MetricSeries } from '../src/model/series';
import { colourAt, PALETTE, trialColours } from '../src/model/trialColours';
import {
  drawnTraces,
  hparamColumn,
  matchesTrial,
  sortTrials,
  TrialTable
} from '../src/model/trialTable';
import { TrialTableSection } from '../src/widgets/trialTable';
import { row, trial } from './fixtures';

/** Four trials of a search over lr and an optimizer's name; trial 4 has no metric yet. */
function search(): ITrial[] {
  return [
    trial({
      id: 1,
      state: 'COMPLETED',
      hparams: { lr: 0.1, opt: { name: 'sgd' } },
      searcher_metric_value: 0.5,
      steps_completed: 100,
      restarts: 1
    }),
    trial({
      id: 2,
      state: 'COMPLETED',
      hparams: { lr: 0.001, opt: { name: 'adam' } },
      searcher_metric_value: 0.2,
      steps_completed: 100
    }),
    trial({
      id: 3,
      state: 'CANCELED',
      hparams: { lr: 0.01, opt: { name: 'Adam' } },
      searcher_metric_value: 0.9,
      steps_completed: 40
    }),
    trial({
      id: 4,
      state: 'ACTIVE',
      hparams: { lr: 0.0123456, opt: { name: 'sgd' } },
      searcher_metric_value: null,
      steps_completed: 10
    })
  ];
}

const ids = (trials: readonly ITrial[]): number[] => trials.map(t => t.id);

describe('sortTrials', () => {
  it('sorts by the searcher metric up and down, trials without one last either way', () => {
    expect(ids(sortTrials(search(), { column: 'metric', descending: false }))).toEqual([
      2, 1, 3, 4
    ]);
    expect(ids(sortTrials(search(), { column: 'metric', descending: true }))).toEqual([3, 1, 2, 4]);
  });

  it("sorts by a hyperparameter's value: numbers as numbers, text ignoring case", () => {
    const lr = hparamColumn('lr');
    expect(ids(sortTrials(search(), { column: lr, descending: false }))).toEqual([2, 3, 4, 1]);
    const name = hparamColumn('opt.name');
    // adam and Adam are equal: by id then.
    expect(ids(sortTrials(search(), { column: name, descending: false }))).toEqual([2, 3, 1, 4]);
    expect(ids(sortTrials(search(), { column: name, descending: true }))).toEqual([1, 4, 2, 3]);
  });

  it('puts numbers before text, and trials without the hyperparameter last', () => {
    const mixed = [
      trial({ id: 1, hparams: { size: 'large' } }),
      trial({ id: 2, hparams: {} }),
      trial({ id: 3, hparams: { size: 8 } })
    ];
    expect(ids(sortTrials(mixed, { column: hparamColumn('size'), descending: false }))).toEqual([
      3, 1, 2
    ]);
  });

  it('sorts by state, batches and restarts, equals by id', () => {
    expect(ids(sortTrials(search(), { column: 'state', descending: false }))).toEqual([4, 3, 1, 2]);
    expect(ids(sortTrials(search(), { column: 'batches', descending: true }))).toEqual([
      1, 2, 3, 4
    ]);
    expect(ids(sortTrials(search(), { column: 'restarts', descending: true }))).toEqual([
      1, 2, 3, 4
    ]);
  });
});

describe('matchesTrial', () => {
  it('keeps the trials in the state asked for', () => {
    const completed = search().filter(t => matchesTrial(t, { state: 'COMPLETED', query: '' }));
    expect(ids(completed)).toEqual([1, 2]);
  });

  it("finds each word in a trial's hyperparameters or state, or as its id", () => {
    const found = (query: string): number[] =>
      ids(search().filter(t => matchesTrial(t, { state: '', query })));
    expect(found('adam')).toEqual([2, 3]);
    expect(found('name=sgd')).toEqual([1, 4]);
    expect(found('lr=0.01')).toEqual([3, 4]);
    expect(found('adam canceled')).toEqual([3]);
    expect(found('#4')).toEqual([4]);
    expect(found('rmsprop')).toEqual([]);
  });
});

describe('TrialTable', () => {
  it('sorts up on a first click of a heading, down on the next, up on a new heading', () => {
    const table = new TrialTable();
    let changes = 0;
    table.changed.connect(() => (changes += 1));
    expect(ids(table.rows(search()))).toEqual([1, 2, 3, 4]);
    table.sortBy('metric');
    expect(table.sort).toEqual({ column: 'metric', descending: false });
    expect(ids(table.rows(search()))).toEqual([2, 1, 3, 4]);
    table.sortBy('metric');
    expect(ids(table.rows(search()))).toEqual([3, 1, 2, 4]);
    table.sortBy('batches');
    expect(table.sort).toEqual({ column: 'batches', descending: false });
    expect(changes).toBe(3);
  });

  it('lists the trials of a state that match the words, sorted', () => {
    const table = new TrialTable();
    table.sortBy('metric');
    table.state = 'COMPLETED';
    expect(ids(table.rows(search()))).toEqual([2, 1]);
    table.query = 'sgd';
    expect(ids(table.rows(search()))).toEqual([1]);
    table.state = '';
    expect(ids(table.rows(search()))).toEqual([1, 4]);
  });

  it('offers the states the trials are in, and the one it filters by', () => {
    const table = new TrialTable();
    expect(table.states(search())).toEqual(['ACTIVE', 'CANCELED', 'COMPLETED']);
    table.state = 'ERROR';
    expect(table.states(search())).toEqual(['ACTIVE', 'CANCELED', 'COMPLETED', 'ERROR']);
  });

  it('ticks and unticks trials, each change a new set', () => {
    const table = new TrialTable();
    const before = table.ticked;
    table.tick(2, true);
    table.tick(3, true);
    table.tick(3, true);
    expect([...table.ticked]).toEqual([2, 3]);
    expect(table.ticked).not.toBe(before);
    table.tick(2, false);
    expect([...table.ticked]).toEqual([3]);
    table.untickAll();
    expect(table.ticked.size).toBe(0);
  });
});

describe('drawnTraces', () => {
  function series(): MetricSeries {
    const s = new MetricSeries();
    let id = 0;
    for (const trialId of [1, 2, 3]) {
      s.add(row(++id, trialId, 10, { loss: 1 / trialId }));
      s.add(row(++id, trialId, 10, { loss: 2 / trialId }, 'validation'));
    }
    return s;
  }

  it('draws every trial while none is ticked, each in its colour', () => {
    const colours = trialColours([3, 1, 2]);
    const drawn = drawnTraces(series().traces('loss'), new Set(), colours);
    expect(drawn.map(t => [t.name, t.colour])).toEqual([
      ['trial 1 training', PALETTE[0]],
      ['trial 1 validation', PALETTE[0]],
      ['trial 2 training', PALETTE[1]],
      ['trial 2 validation', PALETTE[1]],
      ['trial 3 training', PALETTE[2]],
      ['trial 3 validation', PALETTE[2]]
    ]);
  });

  it('draws only the ticked trials, in the colours they have unticked', () => {
    const table = new TrialTable();
    table.tick(3, true);
    table.tick(1, true);
    const colours = trialColours([1, 2, 3]);
    const drawn = drawnTraces(series().traces('loss'), table.ticked, colours);
    expect(drawn.map(t => [t.trialId, t.group, t.colour])).toEqual([
      [1, 'training', PALETTE[0]],
      [1, 'validation', PALETTE[0]],
      [3, 'training', PALETTE[2]],
      [3, 'validation', PALETTE[2]]
    ]);
  });
});

describe('trialColours', () => {
  it('gives a trial the same colour when later trials join', () => {
    const early = trialColours([5, 9]);
    const later = trialColours([12, 9, 5]);
    expect(later.get(5)).toBe(early.get(5));
    expect(later.get(9)).toBe(early.get(9));
    expect(later.get(12)).toBe(PALETTE[2]);
  });

  it('never repeats a colour past the palette', () => {
    const many = Array.from({ length: 60 }, (_, n) => colourAt(n));
    expect(new Set(many).size).toBe(60);
  });
});

describe('TrialTableSection', () => {
  function render(table: TrialTable): string {
    return renderToStaticMarkup(
      React.createElement(TrialTableSection, {
        trials: search(),
        table,
        metric: 'validation_loss',
        colours: trialColours([1, 2, 3, 4]),
        onLogs: () => undefined
      })
    );
  }

  const rowIds = (html: string): number[] =>
    [...html.matchAll(/<tr data-trial-id="(\d+)"/g)].map(m => Number(m[1]));

  it('has a column per hyperparameter that differs, rounded as the dashboard rounds', () => {
    const html = render(new TrialTable());
    const headings = [...html.matchAll(/<th[^>]*data-column="([^"]+)"/g)].map(m => m[1]);
    expect(headings).toEqual([
      'id',
      'state',
      'hparam:lr',
      'hparam:opt.name',
      'batches',
      'progress',
      'metric',
      'restarts'
    ]);
    expect(html).toContain('data-name="lr" title="0.0123456">0.01235</td>');
    expect(rowIds(html)).toEqual([1, 2, 3, 4]);
  });

  it('lists the rows in the sort, marks the sorted heading and ticks the ticked', () => {
    const table = new TrialTable();
    table.sortBy('metric');
    table.sortBy('metric');
    table.tick(2, true);
    const html = render(table);
    expect(rowIds(html)).toEqual([3, 1, 2, 4]);
    expect(html).toMatch(/aria-sort="descending" data-column="metric"/);
    const ticks = [...html.matchAll(/aria-label="Draw trial (\d+) on the chart"( checked="")?/g)];
    expect(ticks.map(m => [Number(m[1]), m[2] !== undefined])).toEqual([
      [3, false],
      [1, false],
      [2, true],
      [4, false]
    ]);
    expect(html).toContain('the chart draws the 1 ticked');
    expect(html).toContain(`style="background:${PALETTE[1]}"`);
  });

  it('says how many trials the filter lists', () => {
    const table = new TrialTable();
    table.state = 'COMPLETED';
    const html = render(table);
    expect(rowIds(html)).toEqual([1, 2]);
    expect(html).toContain('listing 2 of 4 trials');
  });
});
