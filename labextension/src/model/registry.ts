/**
 * Registering a checkpoint in the master's model registry: under an existing model, or under a
 * new one made first. Free of any widget, so that it is tested on its own.
 */

import { DetHubClient, DetHubError } from '../api/client';
import { IModel, IModelVersion } from '../api/types';

/** What registering did: the new version, and whether its model was made for it. */
export interface IRegistered {
  version: IModelVersion;
  createdModel: boolean;
}

/**
 * Registers the checkpoint `uuid` as the next version of the model `modelName`, making the
 * model first when `known` (the models listed when the name was chosen) has none of that name.
 * A model made meanwhile by someone else is used as it is.
 *
 * @throws DetHubError as the master refuses (a bad name, an archived model, a checkpoint that
 *   is not COMPLETED, a model of another user).
 */
export async function registerCheckpoint(
  client: DetHubClient,
  modelName: string,
  uuid: string,
  known: readonly IModel[]
): Promise<IRegistered> {
  let createdModel = false;
  if (!known.some(model => model.name === modelName)) {
    try {
      await client.createModel(modelName);
      createdModel = true;
    } catch (error) {
      // 409: the name is taken, by a model made since the list was read (or an archived one,
      // which the master names when the version is refused).
      if (!(error instanceof DetHubError && error.status === 409)) {
        throw error;
      }
    }
  }
  const version = await client.createModelVersion(modelName, uuid);
  return { version, createdModel };
}

/** How a registration is told: `model "mnist" version 2`. */
export function versionLabel(version: IModelVersion): string {
  return `${version.model_name} v${version.version}`;
}
