/** Which actions the panel offers on an experiment, and to whom. */

import { ExperimentAction, IExperiment, IUser, isActive, isTerminal } from '../api/types';

/**
 * Whether `viewer` may act on the experiment (pause, kill, its priority...): its owner or an
 * admin, as the master checks. Nobody while who the viewer is is not known yet.
 */
export function mayChange(experiment: IExperiment, viewer: IUser | null): boolean {
  return viewer !== null && (viewer.admin || viewer.username === experiment.owner);
}

/**
 * The actions that make sense for an experiment in its present state, of those `viewer` may
 * take: none on another user's experiment, unless the viewer is an admin.
 */
export function actionsFor(experiment: IExperiment, viewer: IUser | null): ExperimentAction[] {
  if (!mayChange(experiment, viewer)) {
    return [];
  }
  if (experiment.archived) {
    return ['unarchive'];
  }
  if (isTerminal(experiment.state)) {
    return ['archive'];
  }
  if (isActive(experiment.state)) {
    return ['pause', 'kill'];
  }
  if (experiment.state === 'PAUSED') {
    return ['activate', 'kill'];
  }
  return ['kill'];
}
