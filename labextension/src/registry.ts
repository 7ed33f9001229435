/**
 * The "Register" action of a checkpoint: a dialog to choose a model of the registry or name a
 * new one, then the checkpoint registered as that model's next version.
 */

import { Dialog, Notification, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { DetHubClient, errorText } from './api/client';
import { ICheckpoint, IExperiment, IModel, IModelVersion } from './api/types';
import { registerCheckpoint } from './model/registry';

/** The dialog's body: the model's name, typed or chosen among the models there are. */
class ModelNameBody extends Widget implements Dialog.IBodyWidget<string> {
  constructor(options: {
    checkpoint: ICheckpoint;
    models: readonly IModel[];
    suggested: string;
    problem: string | null;
  }) {
    super();
    this.addClass('jp-DetHub-registerDialog');
    const { checkpoint, models } = options;
    this._models = models;

    const intro = document.createElement('p');
    intro.textContent =
      `Register checkpoint ${checkpoint.uuid} (trial ${checkpoint.trial_id}, ` +
      `${checkpoint.steps_completed} batches) as the next version of a model.`;

    const label = document.createElement('label');
    label.textContent = 'Model ';
    const input = document.createElement('input');
    input.className = 'jp-mod-styled jp-DetHub-modelName';
    input.setAttribute('aria-label', 'Model name');
    input.value = options.suggested;
    label.appendChild(input);
    this._input = input;

    this.node.append(intro, label);
    if (models.length > 0) {
      const choose = document.createElement('select');
      choose.className = 'jp-mod-styled jp-DetHub-modelChoice';
      choose.setAttribute('aria-label', 'Existing models');
      const none = document.createElement('option');
      none.value = '';
      none.textContent = `or choose one of ${models.length} model${models.length === 1 ? '' : 's'}…`;
      choose.appendChild(none);
      for (const model of models) {
        const option = document.createElement('option');
        option.value = model.name;
        option.textContent = `${model.name} (${model.num_versions} version${model.num_versions === 1 ? '' : 's'})`;
        choose.appendChild(option);
      }
      choose.addEventListener('change', () => {
        if (choose.value) {
          input.value = choose.value;
          this._describe();
        }
      });
      this.node.appendChild(choose);
    }
    this._hint = document.createElement('p');
    this._hint.className = 'jp-DetHub-note jp-DetHub-registerHint';
    this.node.appendChild(this._hint);
    if (options.problem) {
      const problem = document.createElement('p');
      problem.className = 'jp-DetHub-error';
      problem.textContent = `The models could not be listed: ${options.problem}`;
      this.node.appendChild(problem);
    }
    input.addEventListener('input', () => this._describe());
    this._describe();
  }

  getValue(): string {
    return this._input.value.trim();
  }

  /** Says what registering under the name in the box will do. */
  private _describe(): void {
    const name = this.getValue();
    const model = this._models.find(m => m.name === name);
    this._hint.textContent = !name
      ? 'Type a name for a new model, or choose one.'
      : model
        ? `Adds version ${model.num_versions + 1} of model ${name}.`
        : `Makes a new model, ${name}, with this checkpoint as its version 1.`;
  }

  private readonly _input: HTMLInputElement;
  private readonly _hint: HTMLParagraphElement;
  private readonly _models: readonly IModel[];
}

/**
 * Asks which model to register a checkpoint under, registers it, and says which version it
 * became.
 *
 * @returns The new version, or null when cancelled or refused (the refusal is shown).
 */
export async function registerCheckpointDialog(
  client: DetHubClient,
  experiment: IExperiment,
  checkpoint: ICheckpoint
): Promise<IModelVersion | null> {
  let models: IModel[] = [];
  let problem: string | null = null;
  try {
    models = await client.listModels({ archived: false, limit: 1000 });
  } catch (error) {
    problem = errorText(error);
  }
  const result = await showDialog<string>({
    title: `Register checkpoint of experiment ${experiment.id}`,
    body: new ModelNameBody({ checkpoint, models, suggested: experiment.name, problem }),
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Register' })],
    focusNodeSelector: 'input.jp-DetHub-modelName'
  });
  if (!result.button.accept) {
    return null;
  }
  const name = result.value ?? '';
  if (!name) {
    await showErrorMessage('Checkpoint not registered', 'A model needs a name.');
    return null;
  }
  try {
    const { version, createdModel } = await registerCheckpoint(
      client,
      name,
      checkpoint.uuid,
      models
    );
    Notification.success(
      `Checkpoint ${checkpoint.uuid.slice(0, 8)}… registered: version ${version.version} of ` +
        `${createdModel ? 'the new ' : ''}model ${version.model_name}`,
      { autoClose: 8000 }
    );
    return version;
  } catch (error) {
    await showErrorMessage(
      `Could not register checkpoint ${checkpoint.uuid} under model ${name}`,
      errorText(error)
    );
    return null;
  }
}
