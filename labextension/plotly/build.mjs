// Builds plotly/entry.js into prebuilt/det-hub-plotly.min.js, beside the panel it ships with
// (`npm run build:plotly`, the last step of `build:prod`). Plotly.js's own sources need what
// its own build gives them: shaders read as strings, its stylesheet injected by the script.
import { build } from 'esbuild';
import { glsl } from 'esbuild-plugin-glsl';
import inlineCss from 'esbuild-plugin-inline-css';

const here = import.meta.dirname;

await build({
  entryPoints: [`${here}/entry.js`],
  outfile: `${here}/../prebuilt/det-hub-plotly.min.js`,
  bundle: true,
  minify: true,
  format: 'iife',
  target: 'es2018',
  plugins: [inlineCss(), glsl({ minify: true })],
  define: { global: 'window', 'define.amd': 'false', 'process.env.NODE_DEBUG': 'false' },
  logLevel: 'warning'
});
