/** Unit tests of the panel's data layer: TypeScript through ts-jest, in Node (fetch is faked). */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: {
    // Some of JupyterLab's dependencies ship ES modules: they are compiled to CommonJS too.
    '^.+\\.(ts|tsx|js|mjs)$': ['ts-jest', { tsconfig: '<rootDir>/tsconfig.test.json' }]
  },
  transformIgnorePatterns: [
    '/node_modules/(?!(@jupyterlab|@jupyter|@lumino|lib0|yjs|y-protocols)/)'
  ]
};
