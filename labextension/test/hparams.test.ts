import {
  flattenHparams,
  formatG,
  hparamColumns,
  hparamsText,
  shortValue
} from '../src/model/hparams';

describe('formatG', () => {
  // What Python's format(value, '.4g') (det_hub.service.pages.short_value) writes.
  it.each([
    [0.123456789, '0.1235'],
    [1e-5, '1e-05'],
    [0.0001, '0.0001'],
    [0.00012345, '0.0001234'],
    [12345.678, '1.235e+04'],
    [9999.5, '1e+04'],
    [1234.5678, '1235'],
    [1.5, '1.5'],
    [0.1, '0.1'],
    [-3.1415e-5, '-3.142e-05'],
    [3e10, '3e+10'],
    [2.5e-7, '2.5e-07'],
    [0, '0']
  ])('%p as %p', (value, text) => {
    expect(formatG(value, 4)).toBe(text);
  });

  it('writes what is no number as Python does', () => {
    expect([NaN, Infinity, -Infinity].map(v => formatG(v))).toEqual(['nan', 'inf', '-inf']);
  });

  it('keeps as many digits as asked', () => {
    expect(formatG(0.123456789, 6)).toBe('0.123457');
    expect(formatG(123456789, 6)).toBe('1.23457e+08');
  });
});

describe('shortValue', () => {
  it('rounds fractions, and writes lists, mappings, text and the rest as the dashboard does', () => {
    expect(shortValue([1e-5, 'a'])).toBe('[1e-05, a]');
    expect(shortValue({ name: 'adam', lr: 0.001234567 })).toBe('{name=adam, lr=0.001235}');
    expect([true, null, undefined, 3, 'sgd'].map(shortValue)).toEqual([
      'true',
      'null',
      'null',
      '3',
      'sgd'
    ]);
  });

  it('writes whole numbers whole', () => {
    expect(shortValue(123456)).toBe('123456');
  });
});

describe('hparamColumns', () => {
  it('gives a column to each hyperparameter that differs, by dotted name', () => {
    // det_hub.search_view.hparam_columns answers the same for these trials.
    const trials = [
      { hparams: { lr: 0.1, opt: { name: 'sgd', m: 0.9 }, layers: 2 } },
      { hparams: { lr: 0.01, opt: { name: 'sgd', m: 0.5 }, layers: 2 } },
      { hparams: { lr: 0.01, opt: { name: 'sgd' }, layers: 2 } }
    ];
    expect(hparamColumns(trials)).toEqual({
      columns: ['lr', 'opt.m'],
      fixed: { layers: 2, 'opt.name': 'sgd' }
    });
  });

  it('tells lists apart by their items', () => {
    const trials = [{ hparams: { sizes: [64, 32] } }, { hparams: { sizes: [64, 16] } }];
    expect(hparamColumns(trials).columns).toEqual(['sizes']);
  });

  it('has no column for one trial, or none', () => {
    expect(hparamColumns([{ hparams: { lr: 0.1 } }])).toEqual({ columns: [], fixed: { lr: 0.1 } });
    expect(hparamColumns([])).toEqual({ columns: [], fixed: {} });
  });
});

describe('flattenHparams and hparamsText', () => {
  it('names nested hyperparameters with dots, and leaves lists whole', () => {
    const hparams = { opt: { name: 'adam', betas: [0.9, 0.999] }, lr: 0.000123456 };
    expect(flattenHparams(hparams)).toEqual({
      'opt.name': 'adam',
      'opt.betas': [0.9, 0.999],
      lr: 0.000123456
    });
    expect(hparamsText(hparams)).toBe('opt.name=adam, opt.betas=[0.9, 0.999], lr=0.0001235');
    expect(hparamsText(null)).toBe('');
  });
});
