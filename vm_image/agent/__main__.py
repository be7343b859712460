import sys

from spotline.vm_image.agent.agent import main

sys.exit(main())
