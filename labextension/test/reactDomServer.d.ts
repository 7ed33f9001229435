/**
 * The one function of react-dom's server renderer the tests use: react-dom comes with
 * JupyterLab's UI components, without its type declarations.
 */
declare module 'react-dom/server' {
  import { ReactElement } from 'react';

  export function renderToStaticMarkup(element: ReactElement): string;
}
