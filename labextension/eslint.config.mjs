// ESLint for the panel's TypeScript: the recommended rules of ESLint and typescript-eslint,
// JupyterLab's `I` prefix for interfaces, and no rule that Prettier's formatting decides.
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['coverage/', 'lib/', 'node_modules/', 'prebuilt/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  prettier,
  {
    files: ['**/*.ts', '**/*.tsx'],
    rules: {
      '@typescript-eslint/naming-convention': [
        'error',
        { selector: 'interface', format: ['PascalCase'], custom: { regex: '^I[A-Z]', match: true } }
      ],
      '@typescript-eslint/no-namespace': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { args: 'none' }],
      curly: 'error',
      eqeqeq: 'error',
      'no-console': ['error', { allow: ['warn', 'error'] }],
      'prefer-arrow-callback': 'error'
    }
  },
  {
    files: ['jest.config.js'],
    languageOptions: { sourceType: 'commonjs', globals: { module: 'writable' } }
  }
);
