/**
 * The actions on an experiment, each asked for in a dialog first: pause, activate, kill,
 * archive and the priority of its job.
 */

import { Dialog, InputDialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';

import { DetHubClient, errorText } from './api/client';
import { ExperimentAction, IExperiment } from './api/types';

interface IActionText {
  label: string;
  question: (e: IExperiment) => string;
  /** Whether the action ends or hides work, and its button is drawn as a warning. */
  warn: boolean;
}

const ACTIONS: Record<ExperimentAction, IActionText> = {
  pause: {
    label: 'Pause',
    question: e =>
      `Pause experiment ${e.id} (${e.name})? Its running trials checkpoint and stop; ` +
      'activate it to carry on.',
    warn: false
  },
  activate: {
    label: 'Activate',
    question: e => `Activate experiment ${e.id} (${e.name})? Its trials are scheduled again.`,
    warn: false
  },
  kill: {
    label: 'Kill',
    question: e =>
      `Kill experiment ${e.id} (${e.name})? Its trials are stopped at once and the ` +
      'experiment ends as CANCELED.',
    warn: true
  },
  archive: {
    label: 'Archive',
    question: e =>
      `Archive experiment ${e.id} (${e.name})? It leaves the lists; nothing is deleted.`,
    warn: true
  },
  unarchive: {
    label: 'Unarchive',
    question: e => `Unarchive experiment ${e.id} (${e.name})?`,
    warn: false
  }
};

/** An action's button label. */
export function actionLabel(action: ExperimentAction): string {
  return ACTIONS[action].label;
}

/**
 * Asks whether to run `action` on the experiment, and runs it when confirmed.
 *
 * @returns The experiment as the master has it afterwards, or null when not confirmed or
 *   refused (the refusal is shown).
 */
export async function confirmAction(
  client: DetHubClient,
  experiment: IExperiment,
  action: ExperimentAction
): Promise<IExperiment | null> {
  const text = ACTIONS[action];
  const accept = text.warn
    ? Dialog.warnButton({ label: text.label })
    : Dialog.okButton({ label: text.label });
  const result = await showDialog({
    title: `${text.label} experiment ${experiment.id}`,
    body: text.question(experiment),
    buttons: [Dialog.cancelButton(), accept]
  });
  if (!result.button.accept) {
    return null;
  }
  try {
    return await client.experimentAction(experiment.id, action);
  } catch (error) {
    await showErrorMessage(`Could not ${action} experiment ${experiment.id}`, errorText(error));
    return null;
  }
}

/**
 * Asks for a new priority for the experiment's job (1 runs first, 99 last) and sets it.
 *
 * @returns The new priority, or null when not changed.
 */
export async function confirmPriority(
  client: DetHubClient,
  experiment: IExperiment
): Promise<number | null> {
  const result = await InputDialog.getNumber({
    title: `Priority of experiment ${experiment.id} (1 runs first, 99 last)`,
    value: experiment.priority,
    okLabel: 'Set priority'
  });
  if (!result.button.accept || result.value === null) {
    return null;
  }
  const priority = Math.round(result.value);
  if (!(priority >= 1 && priority <= 99)) {
    await showErrorMessage(
      'Priority not changed',
      `A priority is a whole number from 1 to 99, not ${result.value}.`
    );
    return null;
  }
  try {
    const job = await client.setExperimentPriority(experiment.id, priority);
    return job.priority;
  } catch (error) {
    await showErrorMessage(
      `Could not change the priority of experiment ${experiment.id}`,
      errorText(error)
    );
    return null;
  }
}
